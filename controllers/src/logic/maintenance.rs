//! Maintenance windows: an install with windows only gets Plans for maintenance
//! operations (deploy, teardown, trigger) while one is open.

use jiff::Timestamp;
use jiff::civil::Time;
use jiff::tz::TimeZone;
use outpost_api::{MaintenanceWindow, Operation, Weekday};

/// Whether `operation` waits for a maintenance window (those the `maintenance` role runs).
pub fn is_maintenance(operation: Operation) -> bool {
    matches!(
        operation,
        Operation::Deploy | Operation::Teardown | Operation::Trigger
    )
}

/// Whether `now` falls in one of `windows`; no windows means always. A window with an
/// unknown time zone or a malformed start never opens (and says so in the log).
pub fn is_open(windows: &[MaintenanceWindow], now: Timestamp) -> bool {
    windows.is_empty() || windows.iter().any(|w| window_open(w, now))
}

fn window_open(window: &MaintenanceWindow, now: Timestamp) -> bool {
    let zone = match window.timezone.as_deref() {
        None | Some("UTC") => TimeZone::UTC,
        Some(name) => match TimeZone::get(name) {
            Ok(zone) => zone,
            Err(err) => {
                tracing::warn!(timezone = name, error = %err, "unknown maintenance window time zone");
                return false;
            }
        },
    };
    let Ok(start) = Time::strptime("%H:%M", &window.start) else {
        tracing::warn!(start = %window.start, "maintenance window start is not HH:MM");
        return false;
    };
    let local = now.to_zoned(zone.clone());
    // A window that started yesterday may still be open (it can span midnight).
    [local.date().yesterday(), Ok(local.date())]
        .into_iter()
        .flatten()
        .any(|day| {
            if !window.days.iter().any(|d| same_day(*d, day.weekday())) {
                return false;
            }
            let Ok(opens) = day.to_datetime(start).to_zoned(zone.clone()) else {
                return false;
            };
            let closes = opens.timestamp()
                + jiff::SignedDuration::from_mins(i64::from(window.duration_minutes));
            opens.timestamp() <= now && now < closes
        })
}

fn same_day(day: Weekday, weekday: jiff::civil::Weekday) -> bool {
    use jiff::civil::Weekday as J;
    matches!(
        (day, weekday),
        (Weekday::Monday, J::Monday)
            | (Weekday::Tuesday, J::Tuesday)
            | (Weekday::Wednesday, J::Wednesday)
            | (Weekday::Thursday, J::Thursday)
            | (Weekday::Friday, J::Friday)
            | (Weekday::Saturday, J::Saturday)
            | (Weekday::Sunday, J::Sunday)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(
        days: Vec<Weekday>,
        start: &str,
        minutes: u32,
        tz: Option<&str>,
    ) -> MaintenanceWindow {
        MaintenanceWindow {
            days,
            start: start.into(),
            duration_minutes: minutes,
            timezone: tz.map(str::to_owned),
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn opens_on_its_days_for_its_duration() {
        // 2026-11-21 is a Saturday.
        let weekend = [window(
            vec![Weekday::Saturday, Weekday::Sunday],
            "02:00",
            240,
            None,
        )];
        assert!(is_open(&weekend, at("2026-11-21T02:00:00Z")));
        assert!(is_open(&weekend, at("2026-11-21T05:59:59Z")));
        assert!(!is_open(&weekend, at("2026-11-21T06:00:00Z")));
        assert!(!is_open(&weekend, at("2026-11-21T01:59:59Z")));
        assert!(
            !is_open(&weekend, at("2026-11-23T03:00:00Z")),
            "Monday is closed"
        );
        assert!(
            is_open(&[], at("2026-11-23T03:00:00Z")),
            "no windows: always open"
        );
    }

    #[test]
    fn spans_midnight_and_honours_time_zones() {
        let late_friday = [window(vec![Weekday::Friday], "23:00", 120, None)];
        assert!(
            is_open(&late_friday, at("2026-11-21T00:30:00Z")),
            "Friday's window runs into Saturday"
        );
        // 02:00 in Berlin (UTC+1 in November) is 01:00 UTC.
        let berlin = [window(
            vec![Weekday::Saturday],
            "02:00",
            60,
            Some("Europe/Berlin"),
        )];
        assert!(is_open(&berlin, at("2026-11-21T01:30:00Z")));
        assert!(!is_open(&berlin, at("2026-11-21T02:30:00Z")));
        let unknown = [window(
            vec![Weekday::Saturday],
            "02:00",
            60,
            Some("Mars/Olympus"),
        )];
        assert!(!is_open(&unknown, at("2026-11-21T02:30:00Z")));
        assert!(is_maintenance(Operation::Deploy) && !is_maintenance(Operation::Provision));
    }
}
