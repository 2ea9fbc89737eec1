//! What a user sees of the engine at one moment, for the simulator and the live scheduler
//! alike: `kestrel explain` and `kestrel queue` views ([`explain_view`]), the dashboard's
//! JSON and pages ([`dashboard`]), predicted starts and the runtime estimates they read
//! ([`predictions`], [`estimates`]), and the event log ([`events`]).
//!
//! Pure: it reads a `kestrel_core::Scheduler` through [`explain_view::ExplainState`] and
//! does no I/O. A simulated run (`kestrel_sim`) and the live leader's index (`kestrel_live`)
//! each provide the state; the forward runs behind predicted starts are the simulator's,
//! handed in by the caller ([`dashboard::Context::predict`]).

pub mod dashboard;
pub mod estimates;
pub mod events;
pub mod explain_view;
pub mod predictions;
