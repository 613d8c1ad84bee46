//! meshhub-validate's integration tests, one test binary.

mod fixtures;
mod hostile;
