//! [`EtcdAdmin`] over etcd's v3 gRPC API.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    AlarmAction, AlarmOptions, AlarmType, Certificate, Client, CompactionOptions, ConnectOptions,
    DowngradeOptions, Identity, MemberAddOptions, TlsOptions,
};
use tokio::sync::Mutex;

use crate::admin::{EtcdAdmin, SnapshotStream};
use crate::error::{Error, Result};
use crate::model::{
    Alarm, AlarmKind, ContentDigest, DowngradeAction, EndpointStatus, KvHash, Member, MemberId,
};

/// What a client presents to an etcd cluster with client TLS: the CA that
/// signed the members' certificate, its own certificate and key (PEM), and
/// the name the members' certificate is checked against (endpoints may be
/// IP addresses the certificate does not list).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub server_name: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// A user name and password for an etcd cluster with authentication on.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UserCredentials {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for UserCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("UserCredentials")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    fn options(&self) -> TlsOptions {
        TlsOptions::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .domain_name(self.server_name.clone())
    }
}

/// Talks to one etcd cluster through its client URLs.
pub struct GrpcAdmin {
    endpoints: Vec<String>,
    timeout: Duration,
    tls: Option<ClientTls>,
    user: Option<UserCredentials>,
    /// Connections by endpoint ("*" = all endpoints, balanced), reused
    /// across calls.
    clients: Mutex<HashMap<String, Client>>,
    /// With authentication on: the token, issued by a voting member, that
    /// opens each learner's status (see [`GrpcAdmin::learner_status`]).
    learner_tokens: Mutex<HashMap<String, String>>,
}

const ALL: &str = "*";
const STATUS: &str = "status";
/// A member's status asked with the credentials: etcd 3.6 and later refuse
/// it anonymously once authentication is on ("user name is empty").
const AUTHENTICATED_STATUS: &str = "status (authenticated)";
/// A learner's status, with a token another member issued.
const LEARNER_STATUS: &str = "status (learner, with a token)";
/// A token for a learner's status, asked of the voting members.
const AUTHENTICATE_FOR_LEARNER: &str = "authenticate for a learner's status";
/// HTTP/2 windows of a snapshot's connection (see [`GrpcAdmin::bulk_client`]).
const BULK_STREAM_WINDOW: u32 = 8 << 20;
const BULK_CONNECTION_WINDOW: u32 = 16 << 20;

impl GrpcAdmin {
    /// `endpoints` are client URLs (`http://host:2379`); `timeout` bounds
    /// every call, connection included.
    pub fn new(endpoints: Vec<String>, timeout: Duration) -> Self {
        Self {
            endpoints,
            timeout,
            tls: None,
            user: None,
            clients: Mutex::default(),
            learner_tokens: Mutex::default(),
        }
    }

    /// Connects with TLS (the endpoints are `https://` URLs).
    pub fn with_tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The same endpoints, TLS and credentials, without its connections.
    pub fn clone_unconnected(&self) -> Self {
        Self {
            endpoints: self.endpoints.clone(),
            timeout: self.timeout,
            tls: self.tls.clone(),
            user: self.user.clone(),
            clients: Mutex::default(),
            learner_tokens: Mutex::default(),
        }
    }

    /// Authenticates as `user` (the cluster has authentication on).
    pub fn with_user(mut self, user: UserCredentials) -> Self {
        self.user = Some(user);
        self
    }

    /// A connection to one member for a snapshot, with HTTP/2 flow-control
    /// windows sized for a bulk transfer. gRPC's default 64 KiB windows
    /// let the stream run only one window per round trip of window updates:
    /// on a busy machine that capped a snapshot at ~120 MB/s where etcdctl
    /// (Go's gRPC sizes its windows to the bandwidth-delay product) reached
    /// ~320 MB/s from the same member.
    async fn bulk_client(&self, operation: &'static str, endpoint: &str) -> Result<Client> {
        let channel = self.channel(operation, endpoint, true).await?;
        let mut options = ConnectOptions::new().with_timeout(self.timeout);
        if let Some(user) = &self.user {
            options = options.with_user(user.name.clone(), user.password.clone());
        }
        let channel = etcd_client::Channel::Tonic(channel);
        self.deadline(operation, Client::from_channel(channel, Some(options)))
            .await?
            .map_err(|e| Error::from_client(operation, e, None))
    }

    /// A connection of its own to one member (TLS if the admin has it);
    /// with `bulk`, HTTP/2 windows sized for a snapshot.
    async fn channel(
        &self,
        operation: &'static str,
        endpoint: &str,
        bulk: bool,
    ) -> Result<tonic::transport::Channel> {
        let url = if endpoint.contains("://") {
            endpoint.to_owned()
        } else {
            format!("http://{endpoint}")
        };
        let bad = |message: String| Error::Refused {
            operation,
            message: format!("{endpoint}: {message}"),
        };
        let mut channel = tonic::transport::Endpoint::from_shared(url)
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(self.timeout)
            .timeout(self.timeout);
        if bulk {
            channel = channel
                .initial_stream_window_size(Some(BULK_STREAM_WINDOW))
                .initial_connection_window_size(Some(BULK_CONNECTION_WINDOW));
        }
        if let Some(tls) = &self.tls {
            channel = channel
                .tls_config(tls.options())
                .map_err(|e| bad(e.to_string()))?;
        }
        self.deadline(operation, channel.connect())
            .await?
            .map_err(|e| Error::Unavailable {
                operation,
                message: format!("{endpoint}: {e}"),
            })
    }

    /// A learner's status with authentication on. etcd 3.6 and later
    /// answer a status only with a user, and a learner refuses to
    /// authenticate anyone; but etcd's (default, simple) tokens are issued
    /// through raft: every member, learners included, binds the token to
    /// its user when it applies the Authenticate entry. So a voting member
    /// issues the token and the learner accepts it once it has applied
    /// that entry: until then it holds the call (the learner is behind,
    /// which the deadline reports), and a token from before the snapshot
    /// it caught up from it never learns (refused; the next call gets a
    /// fresh one). The token is kept per learner while it works and the
    /// member is a learner.
    async fn learner_status(&self, endpoint: &str) -> Result<etcd_client::StatusResponse> {
        let Some(user) = &self.user else {
            return Err(Error::Refused {
                operation: LEARNER_STATUS,
                message: format!("{endpoint}: no credentials to ask a token with"),
            });
        };
        let cached = self.learner_tokens.lock().await.get(endpoint).cloned();
        let token = match cached {
            Some(token) => token,
            None => self.token_from_a_voter(user, endpoint).await?,
        };
        let asked = async {
            let header = http::HeaderValue::from_str(&token).map_err(|e| Error::Refused {
                operation: LEARNER_STATUS,
                message: format!("etcd issued a token that is no header value: {e}"),
            })?;
            let channel = self.channel(LEARNER_STATUS, endpoint, false).await?;
            let options = ConnectOptions::new().with_timeout(self.timeout);
            let mut client = self
                .deadline(
                    LEARNER_STATUS,
                    Client::from_channel(with_token(channel, header), Some(options)),
                )
                .await?
                .map_err(|e| Error::from_client(LEARNER_STATUS, e, None))?;
            match self.deadline(LEARNER_STATUS, client.status()).await? {
                // A token from before the snapshot the learner caught up
                // from: the next call asks for a fresh one.
                Err(e) if e.to_string().contains("invalid auth token") => Err(Error::Unavailable {
                    operation: LEARNER_STATUS,
                    message: format!("{endpoint}: {e}; asking for a fresh token"),
                }),
                other => other.map_err(|e| Error::from_client(LEARNER_STATUS, e, None)),
            }
        };
        let answer = asked.await;
        // Kept while the member is a learner; once promoted, it is asked
        // as a user over the connection every call shares.
        let mut tokens = self.learner_tokens.lock().await;
        match &answer {
            Ok(status) if status.is_learner() => tokens.insert(endpoint.to_owned(), token),
            _ => tokens.remove(endpoint),
        };
        answer
    }

    /// A token for `user`, asked of each endpoint but the learner's in
    /// turn until one answers (the balanced connection may pick a learner,
    /// which refuses).
    async fn token_from_a_voter(&self, user: &UserCredentials, learner: &str) -> Result<String> {
        let mut last = Error::Unavailable {
            operation: AUTHENTICATE_FOR_LEARNER,
            message: format!("no member but {learner} to ask"),
        };
        for endpoint in self.endpoints.iter().filter(|e| *e != learner) {
            let asked = self
                .run_once(AUTHENTICATE_FOR_LEARNER, endpoint, None, &|c: Client| {
                    let (name, password) = (user.name.clone(), user.password.clone());
                    async move { c.auth_client().authenticate(name, password).await }
                })
                .await;
            match asked {
                Ok(response) => return Ok(response.token().to_owned()),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn client(&self, operation: &'static str, endpoint: &str) -> Result<Client> {
        // A member's status is asked anonymously first: etcd before 3.6
        // answers anyone, and a learner refuses to authenticate anyone
        // ("rpc not supported for learner").
        let authenticate = self.user.is_some() && operation != STATUS;
        let key = if authenticate {
            endpoint.to_owned()
        } else {
            format!("{endpoint} (anonymous)")
        };
        let mut clients = self.clients.lock().await;
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let targets = if endpoint == ALL {
            self.endpoints.clone()
        } else {
            vec![endpoint.to_owned()]
        };
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_timeout(self.timeout)
            .with_keep_alive(Duration::from_secs(10), self.timeout);
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.options());
        }
        if let Some(user) = self.user.as_ref().filter(|_| authenticate) {
            options = options.with_user(user.name.clone(), user.password.clone());
        }
        let client = self
            .deadline(operation, Client::connect(targets, Some(options)))
            .await?
            .map_err(|e| Error::from_client(operation, e, None))?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// The balanced connection to every endpoint, for calls that are not
    /// administration (watching, writing keys).
    pub(crate) async fn client_for(&self, operation: &'static str) -> Result<Client> {
        self.client(operation, ALL).await
    }

    /// Forgets the connections to `endpoint` after a failure, so the next
    /// call reconnects.
    async fn forget(&self, endpoint: &str) {
        let mut clients = self.clients.lock().await;
        clients.remove(endpoint);
        clients.remove(&format!("{endpoint} (anonymous)"));
    }

    pub(crate) async fn deadline<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = T>,
    ) -> Result<T> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| Error::Timeout {
                operation,
                timeout: self.timeout,
            })
    }

    /// Runs `call` against the connection for `endpoint`, with the deadline
    /// and error classification every call gets. A cluster-wide call
    /// ([`ALL`]) that fails to reach a member, or that a learner refuses,
    /// is retried against each endpoint in turn: the balanced connection
    /// may have picked a dead member or a learner, and one live voting
    /// member is enough to answer.
    async fn run<T, F, Fut>(
        &self,
        operation: &'static str,
        endpoint: &str,
        member: Option<u64>,
        call: F,
    ) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let elsewhere = |result: &Result<T>| match result {
            Err(Error::Unavailable { .. } | Error::Timeout { .. }) => true,
            Err(e) => refused_for_learner(e),
            Ok(_) => false,
        };
        let first = self.run_once(operation, endpoint, member, &call).await;
        if endpoint != ALL || self.endpoints.len() < 2 || !elsewhere(&first) {
            return first;
        }
        let mut last = first;
        for single in &self.endpoints {
            last = self.run_once(operation, single, member, &call).await;
            if !elsewhere(&last) {
                return last;
            }
        }
        last
    }

    /// Runs `call` against the first endpoint that answers, in order: one
    /// member's connection while it answers. A member that cannot be
    /// reached, or a learner, passes the call to the next.
    pub(crate) async fn on_one_member<T, F, Fut>(
        &self,
        operation: &'static str,
        call: &F,
    ) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut last = None;
        for endpoint in &self.endpoints {
            match self.run_once(operation, endpoint, None, call).await {
                Err(e @ (Error::Unavailable { .. } | Error::Timeout { .. })) => last = Some(e),
                Err(e) if refused_for_learner(&e) => last = Some(e),
                answered => return answered,
            }
        }
        Err(last.unwrap_or(Error::Unavailable {
            operation,
            message: "no endpoint to ask".to_owned(),
        }))
    }

    async fn run_once<T, F, Fut>(
        &self,
        operation: &'static str,
        endpoint: &str,
        member: Option<u64>,
        call: &F,
    ) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let client = self.client(operation, endpoint).await?;
        let result = self.deadline(operation, call(client)).await;
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                let err = Error::from_client(operation, err, member);
                if matches!(err, Error::Unavailable { .. }) {
                    self.forget(endpoint).await;
                }
                Err(err)
            }
            Err(timeout) => {
                self.forget(endpoint).await;
                Err(timeout)
            }
        }
    }
}

/// etcd's refusal of what a learner does not serve (authenticating,
/// among others); its text is etcd's API (`rpctypes`), stable since 3.4.
fn refused_for_learner(error: &Error) -> bool {
    error.to_string().contains("rpc not supported for learner")
}

/// `channel` with etcd's `token` metadata on every request.
fn with_token(
    channel: tonic::transport::Channel,
    token: http::HeaderValue,
) -> etcd_client::Channel {
    use tower::ServiceExt;
    let service = channel
        .map_request(move |mut request: http::Request<tonic::body::Body>| {
            request.headers_mut().insert("token", token.clone());
            request
        })
        .map_err(tower::BoxError::from);
    etcd_client::Channel::Custom(tower::util::BoxCloneSyncService::new(service))
}

fn member_from(m: &etcd_client::Member) -> Member {
    Member {
        id: MemberId(m.id()),
        name: m.name().to_owned(),
        peer_urls: m.peer_urls().to_vec(),
        client_urls: m.client_urls().to_vec(),
        is_learner: m.is_learner(),
    }
}

#[async_trait]
impl EtcdAdmin for GrpcAdmin {
    async fn member_list(&self) -> Result<Vec<Member>> {
        let response = self
            .run("member list", ALL, None, |mut c| async move {
                c.member_list().await
            })
            .await?;
        Ok(response.members().iter().map(member_from).collect())
    }

    async fn add_learner(&self, peer_urls: &[String]) -> Result<Member> {
        let urls = peer_urls.to_vec();
        let response = self
            .run("member add", ALL, None, |mut c| {
                let urls = urls.clone();
                async move {
                    c.member_add(urls, Some(MemberAddOptions::new().with_is_learner()))
                        .await
                }
            })
            .await?;
        response.member().map(member_from).ok_or(Error::Refused {
            operation: "member add",
            message: "etcd returned no member".to_owned(),
        })
    }

    async fn promote(&self, id: MemberId) -> Result<()> {
        self.run("member promote", ALL, Some(id.0), |mut c| async move {
            c.member_promote(id.0).await
        })
        .await
        .map(|_| ())
    }

    async fn remove(&self, id: MemberId) -> Result<()> {
        self.run("member remove", ALL, Some(id.0), |mut c| async move {
            c.member_remove(id.0).await
        })
        .await
        .map(|_| ())
    }

    async fn status(&self, endpoint: &str) -> Result<EndpointStatus> {
        let ask = |operation| {
            self.run(operation, endpoint, None, |mut c| async move {
                c.status().await
            })
        };
        // Anonymous first: etcd before 3.6 answers anyone. Then as the
        // user; a learner refuses to authenticate anyone, and is asked with
        // a token a voting member issued.
        let response = match ask(STATUS).await {
            Err(e) if self.user.is_some() && e.to_string().contains("user name is empty") => {
                if self.learner_tokens.lock().await.contains_key(endpoint) {
                    self.learner_status(endpoint).await?
                } else {
                    match ask(AUTHENTICATED_STATUS).await {
                        Err(e) if refused_for_learner(&e) => self.learner_status(endpoint).await?,
                        other => other?,
                    }
                }
            }
            other => other?,
        };
        let header = response.header();
        Ok(EndpointStatus {
            endpoint: endpoint.to_owned(),
            member_id: MemberId(header.map_or(0, |h| h.member_id())),
            cluster_id: header.map_or(0, |h| h.cluster_id()),
            leader: MemberId(response.leader()),
            version: response.version().to_owned(),
            db_size: response.db_size(),
            db_size_in_use: response.raft_used_db_size(),
            raft_index: response.raft_index(),
            raft_applied_index: response.raft_applied_index(),
            raft_term: response.raft_term(),
            revision: header.map_or(0, |h| h.revision()),
            is_learner: response.is_learner(),
            errors: response.errors().to_vec(),
            storage_version: response.storage_version().to_owned(),
            downgrade_target: response
                .downgrade_info()
                .filter(|d| d.enabled())
                .map(|d| d.target_version().to_owned()),
        })
    }

    async fn downgrade(&self, action: DowngradeAction) -> Result<String> {
        let operation = action.name();
        let options = match action {
            DowngradeAction::Validate(target) => DowngradeOptions::Validate(target),
            DowngradeAction::Enable(target) => DowngradeOptions::Enable(target),
            DowngradeAction::Cancel => DowngradeOptions::Cancel,
        };
        let response = self
            .run(operation, ALL, None, |c| {
                let options = options.clone();
                async move { c.maintenance_client().downgrade(options).await }
            })
            .await?;
        Ok(response.version().to_owned())
    }

    async fn move_leader(&self, leader_endpoint: &str, target: MemberId) -> Result<()> {
        self.run(
            "move leader",
            leader_endpoint,
            Some(target.0),
            |mut c| async move { c.move_leader(target.0).await },
        )
        .await
        .map(|_| ())
    }

    async fn alarms(&self) -> Result<Vec<Alarm>> {
        let response = self
            .run("alarm list", ALL, None, |mut c| async move {
                c.alarm(AlarmAction::Get, AlarmType::None, None).await
            })
            .await?;
        Ok(response
            .alarms()
            .iter()
            .filter_map(|a| {
                let kind = match a.alarm() {
                    AlarmType::Nospace => AlarmKind::NoSpace,
                    AlarmType::Corrupt => AlarmKind::Corrupt,
                    AlarmType::None => return None,
                };
                Some(Alarm {
                    member: MemberId(a.member_id()),
                    kind,
                })
            })
            .collect())
    }

    async fn disarm(&self, alarm: Alarm) -> Result<()> {
        let kind = match alarm.kind {
            AlarmKind::NoSpace => AlarmType::Nospace,
            AlarmKind::Corrupt => AlarmType::Corrupt,
        };
        self.run(
            "alarm disarm",
            ALL,
            Some(alarm.member.0),
            |mut c| async move {
                let mut options = AlarmOptions::new();
                options.with_member(alarm.member.0);
                c.alarm(AlarmAction::Deactivate, kind, Some(options)).await
            },
        )
        .await
        .map(|_| ())
    }

    async fn compact(&self, revision: i64) -> Result<()> {
        self.run("compact", ALL, None, |mut c| async move {
            c.compact(revision, Some(CompactionOptions::new().with_physical()))
                .await
        })
        .await
        .map(|_| ())
    }

    async fn defragment(&self, endpoint: &str) -> Result<()> {
        self.run("defragment", endpoint, None, |mut c| async move {
            c.defragment().await
        })
        .await
        .map(|_| ())
    }

    async fn snapshot(&self, endpoint: &str) -> Result<SnapshotStream> {
        let mut client = self.bulk_client("snapshot", endpoint).await?;
        let streaming = self
            .deadline("snapshot", client.snapshot())
            .await?
            .map_err(|e| Error::from_client("snapshot", e, None))?;
        let timeout = self.timeout;
        // The deadline applies to each chunk, not the whole snapshot: a
        // large database streams for minutes, but never stalls for long.
        let stream = futures::stream::try_unfold(streaming, move |mut streaming| async move {
            let next = tokio::time::timeout(timeout, streaming.message())
                .await
                .map_err(|_| Error::Timeout {
                    operation: "snapshot",
                    timeout,
                })?
                .map_err(|e| Error::from_client("snapshot", e, None))?;
            Ok(next.map(|chunk| (Bytes::copy_from_slice(chunk.blob()), streaming)))
        });
        Ok(Box::pin(stream))
    }

    async fn enable_auth(&self, root_password: &str) -> Result<()> {
        let password = root_password.to_owned();
        // Data restored from a backup may have authentication on already:
        // then the root password opens it (done), or it does not (an
        // error the caller must explain; adding users would be refused).
        let opens = self
            .run("authenticate as root", ALL, None, |c| {
                let password = password.clone();
                async move {
                    match c
                        .auth_client()
                        .authenticate("root".to_owned(), password)
                        .await
                    {
                        Ok(_) => Ok(true),
                        Err(e) if e.to_string().contains("authentication is not enabled") => {
                            Ok(false)
                        }
                        Err(e) => Err(e),
                    }
                }
            })
            .await?;
        if opens {
            return Ok(());
        }
        // Each step tolerates having been done by an earlier attempt.
        let done = |e: &etcd_client::Error| {
            let text = e.to_string();
            text.contains("already exists") || text.contains("already granted")
        };
        self.run("add user root", ALL, None, |mut c| {
            let password = password.clone();
            async move {
                match c.user_add("root", password, None).await {
                    Err(e) if done(&e) => Ok(()),
                    other => other.map(|_| ()),
                }
            }
        })
        .await?;
        self.run("grant role root", ALL, None, |mut c| async move {
            match c.user_grant_role("root", "root").await {
                Err(e) if done(&e) => Ok(()),
                other => other.map(|_| ()),
            }
        })
        .await?;
        self.run("enable auth", ALL, None, |mut c| async move {
            c.auth_enable().await.map(|_| ())
        })
        .await
    }

    async fn kv_hash(&self, endpoint: &str) -> Result<Option<KvHash>> {
        let hashed = self
            .run(
                "hash",
                endpoint,
                None,
                |mut c| async move { c.hash_kv(0).await },
            )
            .await?;
        Ok(Some(KvHash {
            revision: hashed.header().map_or(0, |h| h.revision()),
            compact_revision: hashed.compact_version(),
            hash: hashed.hash(),
        }))
    }

    async fn content_digest(&self, endpoint: &str, revision: i64) -> Result<Option<ContentDigest>> {
        let hashed = self
            .run("hash", endpoint, None, |mut c| async move {
                c.hash_kv(revision).await
            })
            .await?;
        let counted = self
            .run("count", endpoint, None, |mut c| async move {
                c.get(
                    "",
                    Some(
                        etcd_client::GetOptions::new()
                            .with_all_keys()
                            .with_count_only()
                            .with_revision(revision)
                            .with_serializable(),
                    ),
                )
                .await
            })
            .await?;
        Ok(Some(ContentDigest {
            revision,
            keys: counted.count(),
            hash: hashed.hash(),
            compact_revision: hashed.compact_version(),
        }))
    }
}
