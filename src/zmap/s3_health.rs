//! What an S3 map remembers of a server that stopped answering.
//!
//! A server that accepts connections but never answers costs every request a whole timeout,
//! and a reader through the mount makes many requests for one `read` (the kernel retries a
//! failed readahead page by page). So a server that has gone silent is taken as down:
//! requests fail at once, except one probe at a time, at most one per probe interval (the
//! request timeout), which goes to the server. Any answer from the server, even an error
//! status, brings it back up.
//!
//! One request that runs out of time does not make a server silent: a large object on a busy
//! server or a dropped connection stalls one request while the server answers the others. A
//! stalled request is held against the server only when nothing was answered since it was
//! sent; then a cheap check request (a HEAD with a short time limit, see
//! [`Health::record`]) decides, and requests wait for its verdict rather than risk a whole
//! timeout each. The server is taken as down only when the check gets no answer either.
//!
//! A refused connection is no stall: it fails at once, so asking again costs little, and a
//! server that refuses a check or a probe (stopped, or restarting) is not held as down: the
//! requests that follow go to it, and fail at once or succeed by themselves.

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

/// What [`Health::admit`] says about a request.
#[derive(Debug)]
pub enum Admit<'a> {
    /// Send it, and hand the admission back through [`Health::record`].
    Go(Admission<'a>),
    /// A check of the server is under way: ask again once it is settled.
    Wait,
    /// The server is taken as down and has not answered for this long: fail at once.
    Refuse(Duration),
}

/// The server's state as seen by one map.
#[derive(Debug)]
pub struct Health {
    probe_interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the server last answered a request.
    last_answer: Option<Instant>,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    Up,
    /// A request stalled without any answer since it was sent; a check request decides.
    Checking {
        /// When that request was sent.
        since: Instant,
    },
    Down(Down),
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
            state: Mutex::new(State {
                last_answer: None,
                phase: Phase::Up,
            }),
        }
    }

    /// The least time between two probes of a server taken as down.
    pub fn probe_interval(&self) -> Duration {
        self.probe_interval
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets a request go to the server, has it wait for a check under way, or says for how
    /// long the server has not answered.
    pub fn admit(&self, now: Instant) -> Admit<'_> {
        let mut state = self.lock();
        let probe = match &mut state.phase {
            Phase::Up => false,
            Phase::Checking { .. } => return Admit::Wait,
            Phase::Down(d) if d.probe_in_flight || now < d.next_probe => {
                return Admit::Refuse(now.saturating_duration_since(d.since));
            }
            Phase::Down(d) => {
                d.probe_in_flight = true;
                true
            }
        };
        Admit::Go(Admission {
            health: self,
            probe,
            sent: now,
        })
    }

    /// Makes the next request a probe at once when the server is taken as down and no probe
    /// is under way, instead of when the next one is due; whether the server is down. For a
    /// flush that must not give up on a server that came back since the last probe.
    pub fn probe_now(&self, now: Instant) -> bool {
        match &mut self.lock().phase {
            Phase::Down(d) => {
                if !d.probe_in_flight {
                    d.next_probe = d.next_probe.min(now);
                }
                true
            }
            _ => false,
        }
    }

    /// Records how an admitted request ended. Returns true when the server must now be
    /// checked: the request stalled and nothing was answered since it was sent. The caller
    /// then sends a check request and hands its result to [`Health::settle`]; requests wait
    /// meanwhile.
    #[must_use = "a check that is not sent leaves requests waiting"]
    pub fn record(&self, mut admission: Admission<'_>, outcome: Outcome, now: Instant) -> bool {
        let probe = std::mem::replace(&mut admission.probe, false);
        let mut state = self.lock();
        match outcome {
            Outcome::Answered => {
                state.last_answer = Some(now);
                state.phase = Phase::Up;
                false
            }
            Outcome::Stalled => {
                let answered_since = state.last_answer.is_some_and(|t| t > admission.sent);
                match &mut state.phase {
                    Phase::Up if answered_since => false,
                    Phase::Up => {
                        state.phase = Phase::Checking {
                            since: admission.sent,
                        };
                        true
                    }
                    // The check under way decides.
                    Phase::Checking { .. } => false,
                    Phase::Down(d) => {
                        d.next_probe = now + self.probe_interval;
                        if probe {
                            d.probe_in_flight = false;
                        }
                        false
                    }
                }
            }
            Outcome::Unreachable => {
                if let (true, Phase::Down(_)) = (probe, &state.phase) {
                    state.phase = Phase::Up;
                }
                false
            }
        }
    }

    /// Ends the check [`Health::record`] asked for with how the check request ended. Only a
    /// check that stalled too takes the server as down, since the stalled request was sent.
    pub fn settle(&self, check: Outcome, now: Instant) {
        let mut state = self.lock();
        let Phase::Checking { since } = state.phase else {
            return;
        };
        state.phase = match check {
            Outcome::Answered => {
                state.last_answer = Some(now);
                Phase::Up
            }
            Outcome::Unreachable => Phase::Up,
            Outcome::Stalled => Phase::Down(Down {
                since,
                next_probe: now + self.probe_interval,
                probe_in_flight: false,
            }),
        };
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.probe {
            if let Phase::Down(d) = &mut self.health.lock().phase {
                d.probe_in_flight = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(10);

    fn go(health: &Health, now: Instant) -> Admission<'_> {
        match health.admit(now) {
            Admit::Go(a) => a,
            other => panic!("not admitted: {other:?}"),
        }
    }

    fn refused(health: &Health, now: Instant) -> Option<Duration> {
        match health.admit(now) {
            Admit::Refuse(silent) => Some(silent),
            _ => None,
        }
    }

    #[test]
    fn a_stall_with_answers_since_is_not_held_against_the_server() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let slow = go(&health, t0);
        let quick = go(&health, t0 + Duration::from_secs(1));
        assert!(!health.record(quick, Outcome::Answered, t0 + Duration::from_secs(1)));
        assert!(!health.record(slow, Outcome::Stalled, t0 + Duration::from_secs(30)));
        assert!(matches!(
            health.admit(t0 + Duration::from_secs(30)),
            Admit::Go(_)
        ));
    }

    #[test]
    fn a_lone_stall_is_checked_and_an_answered_check_keeps_the_server_up() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let earlier = go(&health, t0);
        assert!(!health.record(earlier, Outcome::Answered, t0));
        let slow = go(&health, t0 + Duration::from_secs(1));
        let t1 = t0 + Duration::from_secs(31);
        assert!(health.record(slow, Outcome::Stalled, t1));
        // Requests wait for the check; so do others that stall meanwhile, unchecked again.
        assert!(matches!(health.admit(t1), Admit::Wait));
        health.settle(Outcome::Answered, t1 + Duration::from_millis(5));
        assert!(matches!(health.admit(t1), Admit::Go(_)));
    }

    #[test]
    fn an_unanswered_check_takes_the_server_down_until_a_probe_is_answered() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let first = go(&health, t0);
        let second = go(&health, t0);
        assert!(health.record(first, Outcome::Stalled, t0 + Duration::from_secs(30)));
        // A request already on its way when the first stalled ends as it ends.
        assert!(!health.record(second, Outcome::Stalled, t0 + Duration::from_secs(31)));
        health.settle(Outcome::Stalled, t0 + Duration::from_secs(35));

        // Silent since the first stalled request was sent.
        assert_eq!(
            refused(&health, t0 + Duration::from_secs(36)),
            Some(Duration::from_secs(36))
        );
        // After the interval, one probe; the others still fail at once.
        let probe_time = t0 + Duration::from_secs(45);
        let probe = go(&health, probe_time);
        assert!(refused(&health, probe_time).is_some());
        assert!(!health.record(
            probe,
            Outcome::Stalled,
            probe_time + Duration::from_secs(30)
        ));
        assert!(refused(&health, probe_time + Duration::from_secs(31)).is_some());

        let next = probe_time + Duration::from_secs(41);
        let probe = go(&health, next);
        assert!(!health.record(probe, Outcome::Answered, next));
        assert!(matches!(health.admit(next), Admit::Go(_)));
        assert!(matches!(health.admit(next), Admit::Go(_)));
    }

    #[test]
    fn a_probe_asked_for_now_goes_before_it_is_due() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        assert!(!health.probe_now(t0), "a server that is up needs no probe");
        let a = go(&health, t0);
        assert!(health.record(a, Outcome::Stalled, t0));
        health.settle(Outcome::Stalled, t0);
        let t1 = t0 + Duration::from_secs(1);
        assert!(refused(&health, t1).is_some());
        assert!(health.probe_now(t1));
        let probe = go(&health, t1);
        // One probe at a time, even asked for.
        assert!(health.probe_now(t1));
        assert!(refused(&health, t1).is_some());
        assert!(!health.record(probe, Outcome::Answered, t1));
        assert!(matches!(health.admit(t1), Admit::Go(_)));
    }

    #[test]
    fn refused_connections_do_not_take_the_server_down() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let a = go(&health, t0);
        assert!(!health.record(a, Outcome::Unreachable, t0));
        assert!(matches!(health.admit(t0), Admit::Go(_)));
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_request_probe() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let a = go(&health, t0);
        assert!(health.record(a, Outcome::Stalled, t0));
        health.settle(Outcome::Stalled, t0);
        let t1 = t0 + INTERVAL;
        drop(go(&health, t1));
        let probe = go(&health, t1);
        assert!(!health.record(probe, Outcome::Stalled, t1));
        assert!(refused(&health, t1).is_some());
        assert!(matches!(health.admit(t1 + INTERVAL), Admit::Go(_)));
    }

    #[test]
    fn a_refused_check_or_probe_does_not_hold_the_server_down() {
        let health = Health::new(INTERVAL);
        let t0 = Instant::now();
        let slow = go(&health, t0);
        assert!(health.record(slow, Outcome::Stalled, t0));
        // The check finds the server refusing connections: stopped, not hung.
        health.settle(Outcome::Unreachable, t0);
        assert!(matches!(health.admit(t0), Admit::Go(_)));

        let slow = go(&health, t0);
        assert!(health.record(slow, Outcome::Stalled, t0));
        health.settle(Outcome::Stalled, t0);
        let t1 = t0 + INTERVAL;
        let probe = go(&health, t1);
        assert!(!health.record(probe, Outcome::Unreachable, t1));
        assert!(matches!(health.admit(t1), Admit::Go(_)));
    }
}
