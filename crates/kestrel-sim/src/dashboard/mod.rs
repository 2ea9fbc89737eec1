//! The simulator's side of the dashboard: a finished run recorded for the time slider
//! ([`timeline::Timeline`]). The JSON and the pages are `kestrel_view::dashboard`'s, the
//! same for the live leader; HTTP is `kestrel_live::dashboard`'s.

pub mod timeline;

#[cfg(test)]
mod tests;
