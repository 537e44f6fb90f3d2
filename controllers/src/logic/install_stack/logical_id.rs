//! CloudFormation logical ids derived from declared names.

pub(super) use outpost_api::install_stack::pascal_case;

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
