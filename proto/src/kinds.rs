//! The kind table.
