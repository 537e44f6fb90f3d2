//! Outpost's policies: OPA-compatible Rego modules with `deny` and `warn` sets
//! (conftest's convention), evaluated with `regorus`.
