//! Who owns a piece of configuration: the vendor or the customer.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The side of the BYOC contract a value or policy comes from.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Party {
    /// Set by the vendor that publishes the App.
    #[default]
    Vendor,
    /// Set by the customer whose account runs the install.
    Customer,
}
