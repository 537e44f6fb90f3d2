//! CloudFormation logical ids derived from declared names.

/// `text` in PascalCase, keeping only ASCII letters and digits: every run of
/// other characters starts a new word. `eks-upgrade-role` gives
/// `EksUpgradeRole`, `db_password` gives `DbPassword`. Empty when `text` has
/// no letters or digits.
pub(super) fn pascal_case(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word_start = true;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if word_start {
                out.push(c.to_ascii_uppercase());
            } else {
                out.push(c);
            }
            word_start = false;
        } else {
            word_start = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::pascal_case;

    #[test]
    fn words_are_capitalised_and_separators_dropped() {
        assert_eq!(pascal_case("-eks-upgrade-role"), "EksUpgradeRole");
        assert_eq!(pascal_case("db_password"), "DbPassword");
        assert_eq!(pascal_case("a.b@c+d=e,f"), "ABCDEF");
        assert_eq!(pascal_case("v2-role"), "V2Role");
        assert_eq!(pascal_case("--"), "");
    }
}
