//! The store conformance suite: every test runs against both backends, visible by name
//! as `embedded::<test>` and `etcd::<test>`. Tests use a fresh key prefix each, so they
//! may share one etcd (`OUTPOST_TEST_ETCD`); tests that compact get a private one.

mod durability;
mod lost_answers;
mod suite;
mod support;

macro_rules! conformance {
    (shared: [$($shared:ident),* $(,)?], private: [$($private:ident),* $(,)?] $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $shared() {
                    crate::suite::$shared(&crate::support::Backend::embedded().await).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $private() {
                    crate::suite::$private(&crate::support::Backend::embedded().await).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $shared() {
                    crate::suite::$shared(&crate::support::Backend::etcd(false).await).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $private() {
                    crate::suite::$private(&crate::support::Backend::etcd(true).await).await;
                }
            )*
        }
    };
}

conformance!(
    shared: [
        create_conflicts,
        cas_update_and_delete_preconditions,
        revisions_increase_with_every_write,
        paging_reads_a_consistent_snapshot_while_writes_happen,
        list_at_an_older_revision,
        watch_delivers_every_event_once_in_revision_order,
        watch_resumes_after_reconnect_without_gap,
        watch_ignores_other_prefixes,
        a_watch_of_the_empty_prefix_sees_every_key,
        concurrent_cas_increments_are_never_lost,
        invalid_continue_tokens_are_rejected,
    ],
    private: [
        compacted_revisions_are_expired,
        the_compactor_keeps_one_interval_of_history,
    ],
);
