//! Streaming subresources: connections upgraded away from HTTP that carry a multiplexed byte stream.

pub(crate) mod channel_spdy;
pub mod port_forward;
mod port_forward_session;
mod spdy;
