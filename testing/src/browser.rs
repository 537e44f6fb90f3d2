//! The dashboard's browser tests drive headless Chromium through chromedriver
//! (WebDriver, fantoccini): [`Browser`] starts both on a free port and knows the
//! dashboard's login form.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

use crate::{Process, eventually, on_path};

/// chromedriver on a free port and a headless Chromium session through it.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    _driver: Process,
    shots: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session through it; screenshots go
    /// to `shots` (a test passes `$CARGO_TARGET_TMPDIR/ui-screenshots`).
    pub async fn start(shots: impl Into<PathBuf>) -> Browser {
        let port = crate::free_port();
        let driver = Process::new(
            Command::new(on_path("chromedriver"))
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver starts"),
        );
        let url = format!("http://127.0.0.1:{port}");
        let capabilities = serde_json::json!({
            // The control plane's certificate is signed by the test's own CA.
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": on_path("chromium"),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            },
        });
        let capabilities = match capabilities {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("an object literal"),
        };
        let client = eventually(30, "chromedriver to accept a session", async || {
            ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
                .ok()
        })
        .await;
        let shots = shots.into();
        std::fs::create_dir_all(&shots).unwrap();
        println!("dashboard screenshots: {}", shots.display());
        Browser {
            client,
            _driver: driver,
            shots,
        }
    }

    /// Saves a PNG of the whole page as `<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        // Grow the window to the page's height so the screenshot holds all of it.
        let height = self
            .client
            .execute("return document.documentElement.scrollHeight;", vec![])
            .await
            .ok()
            .and_then(|v| v.as_u64())
            .unwrap_or(1000)
            .clamp(600, 4000);
        let _ = self.client.set_window_size(1400, height as u32 + 120).await;
        let _ = self.client.execute("window.scrollTo(0, 0);", vec![]).await;
        let png = self.client.screenshot().await.expect("a screenshot");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
    }

    /// The `data-state` of a fleet cell.
    pub async fn cell_state(&self, id: &str) -> Option<String> {
        let cell = self
            .client
            .find(Locator::Css(&format!("[data-cell='{id}']")))
            .await
            .ok()?;
        cell.attr("data-state").await.ok()?
    }

    /// The element `css` selects, once the page (a click may still be loading the next
    /// one) has it.
    /// A test that does not find it fails naming the page it was on, and its text.
    pub async fn find(&self, css: &str) -> Element {
        match self
            .client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(element) => element,
            Err(e) => {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let text = self
                    .client
                    .execute(
                        "return document.body ? document.body.innerText : '';",
                        vec![],
                    )
                    .await
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let text: String = text.chars().take(3000).collect();
                panic!("no {css} on the page {url:?}: {e}\n--- the page says ---\n{text}")
            }
        }
    }

    /// The text of the element `css` selects (see [`Browser::find`]).
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    /// Logs in to the dashboard at `base` with `token` through its login form.
    pub async fn log_in(&self, base: &str, token: &str) {
        self.client.goto(&format!("{base}/ui")).await.unwrap();
        // Not logged in: the dashboard sends the browser to the login form.
        let url = self.client.current_url().await.unwrap();
        assert_eq!(url.path(), "/ui/login", "{url}");
        let form = self.client.form(Locator::Css("form")).await.unwrap();
        form.set_by_name("token", token).await.unwrap();
        form.submit().await.unwrap();
        eventually(20, "the fleet page after logging in", async || {
            let url = self.client.current_url().await.ok()?;
            (url.path() == "/ui").then_some(())
        })
        .await;
        self.find("#counts").await;
    }

    /// Logs out with the header's button.
    pub async fn log_out(&self) {
        self.find("header .who button").await.click().await.unwrap();
        eventually(20, "the login page after logging out", async || {
            let url = self.client.current_url().await.ok()?;
            (url.path() == "/ui/login").then_some(())
        })
        .await;
    }
}
