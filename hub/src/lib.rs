//! meshhub hub.
