//! Logins: passwords checked on a bounded thread (argon2id), failed logins delayed and logged
//! with the peer's address, and the login commands (38, 44 and the SDK's 40/45) that start a
//! session.

use super::*;

/// The stored form of a password: argon2id (its default cost: 19 MiB, two passes) under a
/// salt fresh from the operating system, as a PHC string.
pub fn hash_password(password: &str) -> String {
    use argon2::PasswordHasher;
    let mut salt = [0u8; 16];
    if let Err(e) = getrandom::fill(&mut salt) {
        tracing::warn!(error = %e, "no random salt for the password hash");
    }
    let salt = argon2::password_hash::SaltString::encode_b64(&salt)
        .unwrap_or_else(|e| unreachable!("16 bytes encode: {e}"));
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .unwrap_or_else(|e| unreachable!("the default parameters hash: {e}"))
}

/// Whether `password` is the one `hash` ([`hash_password`]) was made of (argon2's own
/// constant-time comparison); a hash that does not parse matches nothing.
pub fn password_matches(hash: &str, password: &str) -> bool {
    use argon2::PasswordVerifier;
    argon2::password_hash::PasswordHash::new(hash).is_ok_and(|parsed| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// How long a failed login waits before its eviction: a client guessing passwords gets a few
/// tries a second per connection (and `max_connections` connections).
const FAILED_LOGIN_DELAY: Duration = Duration::from_millis(500);

/// Password hashes are computed on one thread of the node, at a lower priority than the
/// node's own (nice +10): argon2id takes 19 MiB and tens of milliseconds of a core each, so a
/// flood of logins costs at most that core's idle time and bounded memory, whatever the number
/// of connections, and never delays the replicas' ticks. At most this many logins wait for it;
/// past it a login's connection is closed unchecked (the SDK connects again), so that a flood
/// holds neither memory nor descriptors for long.
pub(super) const PASSWORD_QUEUE: usize = 64;

/// Credentials that passed a check, remembered so that a client logging in again is not queued
/// behind a flood of guesses. At most this many are remembered (the oldest forgotten).
const KNOWN_CREDENTIALS: usize = 16;

/// A password to check against a hash, and where the verdict goes.
/// A job of the password thread: a check of a password against a hash (a login, a password
/// change's current password), or the hash of a new password (a user's create, a change).
enum PasswordCheck {
    Verify(String, String, tokio::sync::oneshot::Sender<bool>),
    Hash(String, tokio::sync::oneshot::Sender<String>),
}

/// The password checks of the client port ([`login`]).
pub(super) struct Logins {
    /// The checking thread's queue (at most [`PASSWORD_QUEUE`]).
    checks: std::sync::mpsc::SyncSender<PasswordCheck>,
    /// A key drawn at start, so that [`Logins::known`] holds digests no one can compute
    /// without the process's memory (which holds the hash anyway).
    key: [u8; 32],
    /// Checks made on the checking thread (a test's figure).
    checked: std::sync::atomic::AtomicU64,
    /// HMAC-SHA256 under `key` of each username and password that passed a check.
    known: Mutex<std::collections::VecDeque<[u8; 32]>>,
    /// The checks in flight, by the same digest: a login with the credentials of one being
    /// checked waits for that verdict instead of queuing a check of its own. When a node dies,
    /// its clients (all with the same credentials, often) log in on the others at once; checked
    /// one after the other at tens of milliseconds each, the last of 24 waited 1.9 s before
    /// its first send (the fault harness's `kill-boot`).
    checking: Mutex<HashMap<[u8; 32], tokio::sync::watch::Receiver<Option<bool>>>>,
    /// The failed logins' log lines: when the current window began, the lines logged in it,
    /// and the failures not logged since the last line.
    failure_lines: Mutex<(std::time::Instant, u32, u64)>,
}

/// The checking thread: lowers its own priority, then answers each check in turn until the
/// port is gone.
fn check_passwords(checks: std::sync::mpsc::Receiver<PasswordCheck>) {
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10) {
        tracing::warn!(error = %e, "cannot lower the password-check thread's priority");
    }
    for job in checks {
        match job {
            PasswordCheck::Verify(hash, password, verdict) => {
                let _ = verdict.send(password_matches(&hash, &password));
            }
            PasswordCheck::Hash(password, hashed) => {
                let _ = hashed.send(hash_password(&password));
            }
        }
    }
}

/// At most this many failed logins are logged (each with its peer) in [`FAILURE_LOG_WINDOW`];
/// the next line logged counts the ones left out, so a flood of guesses does not flood the log.
const FAILURE_LINES: u32 = 10;

const FAILURE_LOG_WINDOW: Duration = Duration::from_secs(10);

impl Logins {
    pub(super) fn new() -> Logins {
        let mut key = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut key) {
            // Without a random key the digests are still of the password, never the password;
            // remembering nothing is the safe side.
            tracing::warn!(error = %e, "no random key for remembered logins; every login is checked in full");
        }
        let (checks, queue) = std::sync::mpsc::sync_channel(PASSWORD_QUEUE);
        if let Err(e) = std::thread::Builder::new()
            .name("password-check".into())
            .spawn(move || check_passwords(queue))
        {
            // Every check then fails: logins are refused, the node runs on.
            tracing::error!(error = %e, "cannot start the password-check thread; every login will be refused");
        }
        Logins {
            checks,
            known: Mutex::new(std::collections::VecDeque::new()),
            checking: Mutex::new(HashMap::new()),
            checked: std::sync::atomic::AtomicU64::new(0),
            key,
            failure_lines: Mutex::new((std::time::Instant::now(), 0, 0)),
        }
    }

    /// Whether a failed login may be logged now, and if so how many were not logged before it.
    pub(super) fn log_failure(&self) -> Option<u64> {
        let mut lines = self
            .failure_lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (window, logged, left_out) = &mut *lines;
        if window.elapsed() >= FAILURE_LOG_WINDOW {
            *window = std::time::Instant::now();
            *logged = 0;
        }
        if *logged < FAILURE_LINES {
            *logged += 1;
            Some(std::mem::take(left_out))
        } else {
            *left_out += 1;
            None
        }
    }

    /// Keyed by the hash too: a password changed since leaves no remembered way in.
    pub(super) fn digest(&self, username: &str, hash: &str, password: &str) -> Option<[u8; 32]> {
        use hmac::Mac;
        if self.key == [0; 32] {
            return None;
        }
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key).ok()?;
        mac.update(&(username.len() as u64).to_le_bytes());
        mac.update(username.as_bytes());
        mac.update(&(hash.len() as u64).to_le_bytes());
        mac.update(hash.as_bytes());
        mac.update(password.as_bytes());
        Some(mac.finalize().into_bytes().into())
    }

    pub(super) fn is_known(&self, digest: Option<[u8; 32]>) -> bool {
        digest.is_some_and(|digest| {
            self.known
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(&digest)
        })
    }

    pub(super) fn remember(&self, digest: Option<[u8; 32]>) {
        let Some(digest) = digest else { return };
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !known.contains(&digest) {
            if known.len() == KNOWN_CREDENTIALS {
                known.pop_front();
            }
            known.push_back(digest);
        }
    }

    /// Whether `password` is the one `account`'s hash was made of (`account`: the user the
    /// username names, `None` when none does): remembered, or checked on the checking thread.
    /// `None`: [`PASSWORD_QUEUE`] checks wait already; the login is not checked.
    pub(super) async fn check(
        &self,
        username: &str,
        password: &str,
        account: Option<&str>,
        fallback_hash: &str,
    ) -> Option<bool> {
        let hash = account.unwrap_or(fallback_hash);
        let digest = self.digest(username, hash, password);
        if account.is_some() && self.is_known(digest) {
            return Some(true);
        }
        let Some(digest) = digest.filter(|_| account.is_some()) else {
            // A username that names no user is still hashed: the answer takes as long.
            return Some(self.verify(hash, password).await? && account.is_some());
        };
        loop {
            let (verdict, mut waiting) = {
                let mut checking = self
                    .checking
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(waiting) = checking.get(&digest) {
                    (None, waiting.clone())
                } else {
                    let (verdict, waiting) = tokio::sync::watch::channel(None);
                    checking.insert(digest, waiting.clone());
                    (Some(verdict), waiting)
                }
            };
            let Some(verdict) = verdict else {
                // The same credentials are being checked: their verdict is this one's.
                match waiting.wait_for(Option::is_some).await {
                    Ok(matches) => return *matches,
                    // That check was not made (its login left, or the queue was full): check.
                    Err(_) => continue,
                }
            };
            // The entry goes when this check ends, made or not (a login that leaves drops it).
            let _done = Forget(&self.checking, digest);
            let matches = self.verify(hash, password).await?;
            if matches {
                self.remember(Some(digest));
            }
            let _ = verdict.send(Some(matches));
            return Some(matches);
        }
    }
}

/// Removes a digest's entry from the checks in flight when dropped.
struct Forget<'a>(
    &'a Mutex<HashMap<[u8; 32], tokio::sync::watch::Receiver<Option<bool>>>>,
    [u8; 32],
);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.1);
    }
}

impl Logins {
    /// `password`'s argon2id hash, computed on the password thread (bounded like the logins'
    /// checks: `Err(TRANSIENT_NOT_ACCEPTED)` when [`PASSWORD_QUEUE`] jobs wait already).
    pub(super) async fn hash(&self, password: &str) -> Result<String, u32> {
        let (hashed, answer) = tokio::sync::oneshot::channel();
        self.checks
            .try_send(PasswordCheck::Hash(password.to_owned(), hashed))
            .map_err(|_| status::TRANSIENT_NOT_ACCEPTED)?;
        answer.await.map_err(|_| status::ERROR)
    }

    /// Whether `password` matches `hash`, checked on the password thread. `None`:
    /// [`PASSWORD_QUEUE`] checks wait already (not checked); a thread gone answers no match.
    pub(super) async fn verify(&self, hash: &str, password: &str) -> Option<bool> {
        let (verdict, answer) = tokio::sync::oneshot::channel();
        self.checked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.checks.try_send(PasswordCheck::Verify(
            hash.to_owned(),
            password.to_owned(),
            verdict,
        )) {
            Ok(()) => Some(answer.await.unwrap_or(false)),
            Err(std::sync::mpsc::TrySendError::Full(_)) => None,
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => Some(false),
        }
    }
}

pub(super) async fn login<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    (header, peer): (&RequestHeader, SocketAddr),
    protocol: u32,
    username: &str,
    password: &str,
    session: &mut Option<Session>,
) -> Answer {
    if !iggy_protocol::codes::is_compatible(protocol) {
        return Answer::Evict(EvictionReason::IncompatibleProtocol);
    }
    let config = &shared.config;
    // The root (the configuration's) or an active user of the metadata state, read current (a
    // user deactivated, deleted or given a new password through another node an instant ago
    // counts). Without a barrier the session cannot register either.
    if let Err(code) = read_barrier(shared, GroupKind::Metadata.id()).await {
        return error(code);
    }
    let account = crate::users::account(&shared.views.metadata(), config, username);
    let Some(matches) = shared
        .logins
        .check(
            username,
            password,
            account.as_ref().map(|(_, hash)| hash.as_str()),
            &config.root_password_hash,
        )
        .await
    else {
        if shared
            .counters
            .logins_shed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(1_000)
        {
            tracing::warn!(%peer, waiting = PASSWORD_QUEUE, "client port: too many logins wait for a password check; closing this one unchecked");
        }
        return error(CLOSE_CONNECTION);
    };
    if !matches {
        shared
            .counters
            .failed_logins
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(left_out) = shared.logins.log_failure() {
            tracing::warn!(%peer, username, not_logged_before = left_out, "client port: a login with a wrong username or password (at most 10 lines per 10 s; iggy_client_failed_logins_total counts them all)");
        }
        tokio::time::sleep(FAILED_LOGIN_DELAY).await;
        return Answer::Evict(EvictionReason::InvalidCredentials);
    }
    let user_id = account.map_or(ROOT_USER_ID, |(id, _)| id);
    start_session(shared, header, user_id, session).await
}

/// A login with a personal access token: the token's SHA-256 must name a token of the
/// metadata state (read current) that has not expired, of the root or of an active user.
pub(super) async fn login_with_token<S: Storage + Clone + Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    (header, peer): (&RequestHeader, SocketAddr),
    protocol: u32,
    token: &str,
    session: &mut Option<Session>,
) -> Answer {
    if !iggy_protocol::codes::is_compatible(protocol) {
        return Answer::Evict(EvictionReason::IncompatibleProtocol);
    }
    if let Err(code) = read_barrier(shared, GroupKind::Metadata.id()).await {
        return error(code);
    }
    let user = crate::users::token_user(
        &shared.views.metadata(),
        &crate::users::token_hash(token),
        shared.clock.now_us(),
    );
    let Some(user_id) = user else {
        shared
            .counters
            .failed_logins
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(left_out) = shared.logins.log_failure() {
            tracing::warn!(%peer, not_logged_before = left_out, "client port: a login with an unknown or expired token (at most 10 lines per 10 s; iggy_client_failed_logins_total counts them all)");
        }
        tokio::time::sleep(FAILED_LOGIN_DELAY).await;
        return Answer::Evict(EvictionReason::InvalidToken);
    };
    start_session(shared, header, user_id, session).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logins with the same credentials that arrive together wait for one check (a node's
    /// clients moving to this one after it died); a wrong password among them is still
    /// checked on its own and refused; a login after a check is answered from memory.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn logins_with_the_same_credentials_share_one_check() {
        let logins = Arc::new(Logins::new());
        let hash = hash_password("secret");
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (logins, hash) = (logins.clone(), hash.clone());
            tasks.push(tokio::spawn(async move {
                let password = if i == 7 { "wrong" } else { "secret" };
                logins.check("iggy", password, Some(&hash), &hash).await
            }));
        }
        let mut verdicts = Vec::new();
        for task in tasks {
            verdicts.push(task.await.expect("a check"));
        }
        assert_eq!(verdicts[..7], [Some(true); 7]);
        assert_eq!(verdicts[7], Some(false));
        assert_eq!(
            logins.checked.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "one check for the seven, one for the wrong password"
        );
        assert_eq!(
            logins.check("iggy", "secret", Some(&hash), &hash).await,
            Some(true)
        );
        assert_eq!(logins.checked.load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
