//! The stages of one reconcile pass, each consuming the previous one's
//! output: observed ([`super::dereference`]) → [`validated`] →
//! [`connected`] (credentials, then etcd's view through them) →
//! [`planned`] → built ([`super::build`], pure) → [`applied`] →
//! [`executed`]; then the maintenance [`super::steps`] of a converged
//! cluster. The driver keeps each stage's output in
//! [`super::pass::Pass`] as the stage finishes; status and the metrics are
//! derived from how far the pass got.

pub mod applied;
pub mod connected;
pub mod executed;
pub mod planned;
pub mod validated;
