//! Cron schedules of actions (`type: cron` triggers), five fields or six with seconds.

use croner::parser::{CronParser, Seconds};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Why a schedule cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid cron schedule {schedule:?}: {reason}")]
pub struct ScheduleError {
    schedule: String,
    reason: String,
}

/// When a schedule fires, in UTC.
pub struct Schedule {
    text: String,
    cron: croner::Cron,
}

impl Schedule {
    /// Parses `min hour day month weekday`, optionally with leading seconds.
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(text)
            .map_err(|e| ScheduleError {
                schedule: text.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Schedule {
            text: text.to_owned(),
            cron,
        })
    }

    /// The first firing strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Result<Timestamp, ScheduleError> {
        self.cron
            .find_next_occurrence(&after.to_zoned(TimeZone::UTC), false)
            .map(|z| z.timestamp())
            .map_err(|e| ScheduleError {
                schedule: self.text.clone(),
                reason: e.to_string(),
            })
    }

    /// The latest firing in `(after, now]`, if any (missed firings collapse into the
    /// latest one), and the first firing after `now`.
    pub fn due(
        &self,
        after: Timestamp,
        now: Timestamp,
    ) -> Result<(Option<Timestamp>, Timestamp), ScheduleError> {
        // Far behind (a long outage): only the recent past matters.
        let mut cursor = after.max(now - jiff::SignedDuration::from_hours(24));
        let mut due = None;
        loop {
            let next = self.next_after(cursor)?;
            if next > now {
                return Ok((due, next));
            }
            due = Some(next);
            cursor = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn collapses_missed_firings_and_finds_the_next() {
        let hourly = Schedule::parse("0 * * * *").unwrap();
        let (due, next) = hourly
            .due(at("2026-11-22T00:30:00Z"), at("2026-11-22T03:10:00Z"))
            .unwrap();
        assert_eq!(due, Some(at("2026-11-22T03:00:00Z")));
        assert_eq!(next, at("2026-11-22T04:00:00Z"));
        let (due, _) = hourly
            .due(at("2026-11-22T03:00:00Z"), at("2026-11-22T03:10:00Z"))
            .unwrap();
        assert_eq!(due, None, "already ran at 03:00");
        let every_two_seconds = Schedule::parse("*/2 * * * * *").unwrap();
        assert_eq!(
            every_two_seconds
                .next_after(at("2026-11-22T00:00:01Z"))
                .unwrap(),
            at("2026-11-22T00:00:02Z")
        );
        assert!(Schedule::parse("not a schedule").is_err());
    }
}
