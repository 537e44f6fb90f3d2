//! The controllers' pure logic: functions of values, no API calls, unit tested on
//! values. The [`reconcilers`](crate::reconcilers) call it; it never names them.

pub mod app_check;
pub mod app_objects;
pub mod cron;
pub mod drift;
pub mod gate;
pub mod graph;
pub mod install_stack;
pub mod kubernetes_secrets;
pub mod maintenance;
pub mod plan_policies;
pub mod reference;
pub mod role_chain;
pub mod rollout_waves;
pub mod template;
