//! Values the step functions' unit tests share: an App with a sandbox, its components
//! and the release they make.

use outpost_api::{App, Component};
use serde_json::json;

use crate::caches::app_cache::Release;
use crate::logic::template::tests::app as template_app;

/// A `kubernetes_manifest` component of `shopfront` whose manifest is `content`.
pub(super) fn component(name: &str, dependencies: &[&str], content: &str) -> Component {
    serde_json::from_value(json!({
        "apiVersion": outpost_api::API_VERSION, "kind": "Component",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"app": "shopfront", "type": "kubernetes_manifest",
                 "manifest": {"namespace": "shop", "content": content},
                 "dependencies": dependencies},
    }))
    .expect("a valid Component")
}

/// The template tests' App with a Terraform sandbox.
pub(super) fn app() -> App {
    let mut app = template_app();
    app.spec.sandbox =
        serde_json::from_value(json!({"type": "terraform_module", "source": "/modules/sandbox"}))
            .expect("a valid sandbox");
    app
}

/// The release `app()` and `components` make.
pub(super) fn release(components: Vec<Component>) -> Release {
    Release::new(app(), components, vec![], vec![])
}
