//! What an S3 map remembers of a server that stopped answering.
//!
//! A server that accepts connections but never answers costs every request a whole timeout,
//! and a reader through the mount makes many requests for one `read` (the kernel retries a
//! failed readahead page by page). Once a request has stalled, the server is taken as down:
//! requests fail at once, except one probe at a time, at most one per probe interval (the
//! request timeout), which goes to the server. Any answer from the server, even an error
//! status, brings it back up.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How a request to the server ended, for [`Health::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered (any HTTP status).
    Answered,
    /// No answer within the time limits: the server hangs.
    Stalled,
    /// No answer, but quickly (connection refused): asking again costs little.
    Unreachable,
}

/// The server's state as seen by one map.
#[derive(Debug)]
pub struct Health {
    probe_interval: Duration,
    down: Mutex<Option<Down>>,
}

#[derive(Debug)]
struct Down {
    /// When the first stalled request of this outage was sent: the server has not answered
    /// since.
    since: Instant,
    /// No probe before this time.
    next_probe: Instant,
    probe_in_flight: bool,
}

/// Leave to send one request; hand it back through [`Health::record`]. A probe that is
/// dropped unrecorded (its request abandoned) lets the next request probe.
#[derive(Debug)]
pub struct Admission<'a> {
    health: &'a Health,
    probe: bool,
    /// When the request was let go.
    sent: Instant,
}

impl Health {
    /// A server taken as up, probed at most once per `probe_interval` while down.
    pub fn new(probe_interval: Duration) -> Health {
        Health {
            probe_interval,
            down: Mutex::new(None),
        }
    }

    /// The least time between two probes of a server taken as down.
    pub fn probe_interval(&self) -> Duration {
        self.probe_interval
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Down>> {
        self.down.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets a request go to the server, or says for how long the server has not answered.
    pub fn admit(&self, now: Instant) -> Result<Admission<'_>, Duration> {
        let mut down = self.lock();
        let Some(d) = down.as_mut() else {
            return Ok(Admission {
                health: self,
                probe: false,
                sent: now,
            });
        };
        if d.probe_in_flight || now < d.next_probe {
            return Err(now.saturating_duration_since(d.since));
        }
        d.probe_in_flight = true;
        Ok(Admission {
            health: self,
            probe: true,
            sent: now,
        })
    }

    /// Records how an admitted request ended.
    pub fn record(&self, mut admission: Admission<'_>, outcome: Outcome, now: Instant) {
        let probe = std::mem::replace(&mut admission.probe, false);
        let mut down = self.lock();
        match outcome {
            Outcome::Answered => *down = None,
            Outcome::Stalled => {
                let since = down.as_ref().map_or(admission.sent, |d| d.since);
                *down = Some(Down {
                    since,
                    next_probe: now + self.probe_interval,
                    probe_in_flight: false,
                });
            }
            Outcome::Unreachable => {
                if let (true, Some(d)) = (probe, down.as_mut()) {
                    d.probe_in_flight = false;
                    d.next_probe = now + self.probe_interval;
                }
            }
        }
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.probe {
            if let Some(d) = self.health.lock().as_mut() {
                d.probe_in_flight = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(10);

    #[test]
    fn a_stall_fails_requests_at_once_until_a_probe_is_answered() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let first = health.admit(t0).unwrap();
        let second = health.admit(t0).unwrap();
        health.record(first, Outcome::Stalled, t0 + Duration::from_secs(30));
        // A request already on its way when the first stalled ends as it ends.
        health.record(second, Outcome::Stalled, t0 + Duration::from_secs(31));

        // Silent since the first stalled request was sent.
        let later = t0 + Duration::from_secs(35);
        assert_eq!(health.admit(later).unwrap_err(), Duration::from_secs(35));
        // After the interval, one probe; the others still fail at once.
        let probe_time = t0 + Duration::from_secs(41);
        let probe = health.admit(probe_time).unwrap();
        assert!(health.admit(probe_time).is_err());
        health.record(
            probe,
            Outcome::Stalled,
            probe_time + Duration::from_secs(30),
        );
        assert!(health.admit(probe_time + Duration::from_secs(31)).is_err());

        let next = probe_time + Duration::from_secs(41);
        let probe = health.admit(next).unwrap();
        health.record(probe, Outcome::Answered, next);
        assert!(health.admit(next).is_ok());
        assert!(health.admit(next).is_ok());
    }

    #[test]
    fn refused_connections_do_not_take_the_server_down() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let a = health.admit(t0).unwrap();
        health.record(a, Outcome::Unreachable, t0);
        assert!(health.admit(t0).is_ok());
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_request_probe() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let a = health.admit(t0).unwrap();
        health.record(a, Outcome::Stalled, t0);
        let t1 = t0 + INTERVAL;
        drop(health.admit(t1).unwrap());
        let probe = health.admit(t1).unwrap();
        // A probe that finds the server refusing connections waits the interval again.
        health.record(probe, Outcome::Unreachable, t1);
        assert!(health.admit(t1).is_err());
        assert!(health.admit(t1 + INTERVAL).is_ok());
    }
}
