//! Prints every CRD as JSON.
fn main() {
    for crd in outpost_api::crds() {
        println!(
            "{}",
            serde_json::to_string_pretty(&crd).expect("a CRD serialises")
        );
    }
}
