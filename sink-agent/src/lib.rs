//! sink agent.
