//! meshhub-bench's integration tests, one binary: one module per subject
//! (a new file joins as a module here rather than as another test binary).

mod quick;
