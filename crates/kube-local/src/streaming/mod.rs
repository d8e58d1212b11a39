//! Streaming subresources: connections upgraded away from HTTP that carry a multiplexed byte stream.

pub mod port_forward;
mod port_forward_session;
mod spdy;
