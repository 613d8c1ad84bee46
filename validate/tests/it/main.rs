//! meshhub-validate's integration tests, one test binary.

mod fixtures;
mod hostile;
mod istio_1_32;
mod limits;
