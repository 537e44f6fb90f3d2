use super::*;

fn module(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, content) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }
    dir
}

#[test]
fn providers_come_from_requirements_blocks_resources_and_modules() {
    let dir = module(&[
        (
            "main.tf",
            r#"
terraform {
  required_providers {
    evil = { source = "Acme/Evil", version = "1.0.0" }
    aws  = "~> 5.0"
  }
}
provider "aws" { region = "eu-west-1" }
resource "evil_thing" "x" {}
resource "terraform_data" "d" {}
data "aws_partition" "p" { provider = aws.west }
check "up" {
  data "http" "ping" { url = "https://example.com" }
}
module "net" {
  source    = "./net"
  providers = { google = google.eu }
}
"#,
        ),
        (
            "net/net.tf.json",
            r#"{"terraform": {"required_providers": {"db": {"source": "example.com/acme/db"}}},
                    "resource": {"db_instance": {"main": {"provider": "db.x"}}}}"#,
        ),
    ]);
    let config = Configuration::read(dir.path()).unwrap();
    let sources: Vec<&str> = config.providers.keys().map(String::as_str).collect();
    assert_eq!(
        sources,
        [
            "example.com/acme/db",
            "registry.terraform.io/acme/evil",
            "registry.terraform.io/hashicorp/aws",
            "registry.terraform.io/hashicorp/google",
            "registry.terraform.io/hashicorp/http",
            BUILTIN,
        ]
    );
    let evil = &config.providers["registry.terraform.io/acme/evil"];
    assert_eq!(evil.versions, BTreeSet::from(["1.0.0".to_owned()]));
    assert_eq!(
        config.providers["example.com/acme/db"].modules,
        BTreeSet::from(["module.net".to_owned()])
    );
    assert_eq!(config.installed_providers().count(), 5);
    let document = config.document(|s| s.ends_with("/aws"));
    let allowed: Vec<(&str, bool)> = document["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["source"].as_str().unwrap(), p["allowed"] == true))
        .collect();
    assert!(allowed.contains(&("registry.terraform.io/hashicorp/aws", true)));
    assert!(allowed.contains(&("registry.terraform.io/acme/evil", false)));
    assert!(allowed.contains(&(BUILTIN, true)));
    assert_eq!(
        document["modules"],
        json!([{"module": "root", "name": "net", "source": "./net", "path": "net"}])
    );
    let resources = document["resources"].as_array().unwrap();
    assert!(
        resources.contains(&json!({"module": "module.net", "mode": "managed",
            "type": "db_instance", "name": "main", "provider": "example.com/acme/db"}))
    );
    assert!(resources.contains(&json!({"module": "root", "mode": "data",
            "type": "aws_partition", "name": "p",
            "provider": "registry.terraform.io/hashicorp/aws"})));
    let paths: Vec<&str> = document["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["main.tf", "net/net.tf.json"]);
    assert!(
        document["files"][0]["content"]
            .as_str()
            .unwrap()
            .contains("evil_thing")
    );
}

#[test]
fn remote_and_escaping_module_sources_are_refused() {
    for source in [
        "git::https://example.com/m.git",
        "acme/db/aws",
        "../outside",
        "/etc",
    ] {
        let dir = module(&[(
            "main.tf",
            &format!("module \"m\" {{\n  source = \"{source}\"\n}}\n"),
        )]);
        let error = Configuration::read(dir.path()).unwrap_err();
        assert!(
            matches!(&error, ConfigurationError::ModuleSource { source_address, .. } if source_address == source),
            "{source}: {error}"
        );
    }
}

#[test]
fn unparsable_files_and_bad_sources_are_errors() {
    let broken = module(&[("main.tf", "resource \"x\" {\n")]);
    assert!(matches!(
        Configuration::read(broken.path()),
        Err(ConfigurationError::Parse { .. })
    ));
    let bad = module(&[(
        "main.tf",
        "terraform {\n  required_providers {\n    x = { source = \"a/b/c/d\" }\n  }\n}\n",
    )]);
    assert!(matches!(
        Configuration::read(bad.path()),
        Err(ConfigurationError::InvalidSource { .. })
    ));
    assert_eq!(
        normalise("AWS").as_deref(),
        Some("registry.terraform.io/hashicorp/aws")
    );
}
