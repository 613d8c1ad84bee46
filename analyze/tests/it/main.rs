//! meshhub-analyze's integration tests (one binary).

mod istio_testdata;
mod since;
