//! The chaos soak (issue 13): the real hub, three real sink agents and
//! `meshhubctl watch` consumers as processes, every connection between
//! them through a [`proxy::FaultProxy`] link, while a seeded
//! [`generator::Generator`] changes the hub's file source and random
//! faults hit processes and links ([`faults`]). At the end everything is
//! healed and the [`oracle`] checks that every agent's persisted state and
//! every consumer's view equal the hub's snapshot for its cluster, which
//! equals the generator's model.

pub mod faults;
pub mod generator;
pub mod oracle;
pub mod proxy;
pub mod soak;
pub mod stuck;

pub use soak::{Report, Soak};
