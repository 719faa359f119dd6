//! k3k facade
