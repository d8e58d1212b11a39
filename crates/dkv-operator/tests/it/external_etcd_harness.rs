//! The harness for a bare etcd cluster outside Kubernetes
//! (`dkv_test_support::external_etcd`), which the tests of adopting a
//! running cluster (`spec.bootstrap.join`) start, tested on its own: it
//! serves over TLS with client certificates only; a member crashed or
//! stopped comes back with what it missed; the members resolve the names
//! their hosts file is given (a new member whose peer URL only that file
//! resolves joins as a learner, gets the data and is promoted, as dkv's
//! members will); the file follows a DistributedKV's member pods; and the
//! client certificate becomes the Secret `clientSecretRef` names.

use dkv_test_support as support;

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use dkv_operator::parts::naming::member_host;
use dkv_operator::pki::Usage;
use etcd_client::{Certificate, GetOptions, Identity, MemberAddOptions, TlsOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::etcd_cluster::put_retrying;
use support::external_etcd::{ExternalEtcd, ExternalEtcdOptions, dkv_peer_names};
use support::tls::{can_read, options, secret_text};
use support::{eventually, eventually_ok};

const NS: &str = "adopt";
const CLUSTER: &str = "orders";
/// How long a change may take to show, and how often to look.
const WITHIN: Duration = Duration::from_secs(30);
const EVERY: Duration = Duration::from_millis(200);

fn with_tls(members: usize) -> ExternalEtcdOptions {
    ExternalEtcdOptions {
        members,
        tls: true,
        ..ExternalEtcdOptions::default()
    }
}

/// The value of `key` as member `endpoint` alone has it (a serializable
/// read, which learners serve too).
async fn local_value(etcd: &ExternalEtcd, endpoint: &str, key: &str) -> Option<String> {
    let mut member = etcd_client::Client::connect([endpoint], Some(etcd.connect_options()))
        .await
        .ok()?;
    let response = member
        .get(key, Some(GetOptions::new().with_serializable()))
        .await
        .ok()?;
    Some(response.kvs().first()?.value_str().ok()?.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_etcd_harness_serves_over_tls_restarts_a_member_and_resolves_its_hosts_file() {
    let began = Instant::now();
    let mut etcd = ExternalEtcd::start(with_tls(3)).await;
    eprintln!("3 members ready after {:?}", began.elapsed());
    let endpoints = etcd.client_endpoints();
    assert_eq!(endpoints.len(), 3);
    for endpoint in &endpoints {
        assert!(
            endpoint.starts_with("https://127.252.") && endpoint.ends_with(":2379"),
            "{endpoint}"
        );
    }

    // Through the client certificate; never without it.
    let mut client = etcd.connect().await;
    put_retrying(&mut client, "adopt/greeting", "hello").await;
    let read = client.get("adopt/greeting", None).await.unwrap();
    assert_eq!(read.kvs()[0].value_str().unwrap(), "hello");
    let tls = etcd.tls().unwrap();
    let anonymous = TlsOptions::new().ca_certificate(Certificate::from_pem(tls.ca_pem()));
    assert!(
        can_read(&endpoints[0], options(Some(anonymous)))
            .await
            .is_err(),
        "a member served a client without a certificate"
    );
    let plaintext = endpoints[0].replacen("https://", "http://", 1);
    assert!(can_read(&plaintext, options(None)).await.is_err());

    // Three started voters with the harness's names and URLs.
    let list = client.member_list().await.unwrap();
    let mut members: Vec<(String, Vec<String>, Vec<String>, bool)> = list
        .members()
        .iter()
        .map(|m| {
            (
                m.name().to_owned(),
                m.peer_urls().to_vec(),
                m.client_urls().to_vec(),
                m.is_learner(),
            )
        })
        .collect();
    members.sort();
    let expected: Vec<(String, Vec<String>, Vec<String>, bool)> = etcd
        .member_names()
        .into_iter()
        .zip(etcd.peer_urls())
        .zip(endpoints.clone())
        .map(|((name, peer), client)| (name, vec![peer], vec![client], false))
        .collect();
    assert_eq!(members, expected);
    assert_eq!(etcd.member_names(), ["old-1", "old-2", "old-3"]);
    let ids = etcd.member_ids().await;
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|(_, id)| *id != 0), "{ids:x?}");

    // A member crashes and comes back from its data with what it missed.
    etcd.kill("old-2");
    put_retrying(&mut client, "adopt/while-down", "written").await;
    etcd.start_again("old-2").await;
    let old_2 = etcd.client_endpoint("old-2");
    eventually("old-2 catching up", WITHIN, EVERY, async || {
        (local_value(&etcd, &old_2, "adopt/while-down")
            .await
            .as_deref()
            == Some("written"))
        .then_some(())
    })
    .await;
    assert_eq!(etcd.member_ids().await, ids, "old-2 restarted as itself");
    // Another is stopped (SIGTERM): its port closes, and it comes back too.
    etcd.stop("old-3").await;
    let old_3 = SocketAddr::from((etcd.address_of("old-3"), 2379));
    assert!(TcpStream::connect_timeout(&old_3, Duration::from_secs(1)).is_err());
    put_retrying(&mut client, "adopt/while-stopped", "written").await;
    etcd.start_again("old-3").await;
    let old_3 = etcd.client_endpoint("old-3");
    eventually("old-3 catching up", WITHIN, EVERY, async || {
        (local_value(&etcd, &old_3, "adopt/while-stopped")
            .await
            .as_deref()
            == Some("written"))
        .then_some(())
    })
    .await;

    // A name only the hosts file knows: where dkv's first member will be.
    let host = member_host(CLUSTER, NS, 0);
    let ip = etcd.next_address();
    assert_eq!(etcd.resolves_in("old-1", &host).await, None);
    etcd.set_hosts(&[(&host, IpAddr::V4(ip))]);
    for name in etcd.member_names() {
        assert_eq!(
            etcd.resolves_in(&name, &host).await,
            Some(IpAddr::V4(ip)),
            "{name} does not resolve {host}"
        );
    }
    // The old members reach a learner by that name: it gets the data
    // from the leader, and is promoted once caught up.
    // etcd refuses to add a member until every voter has been connected
    // for 5 s (old-3 only just came back).
    let peer_url = etcd.peer_url_at(&host);
    let added = eventually_ok("adding a learner", WITHIN, EVERY, async || {
        let learner = MemberAddOptions::new().with_is_learner();
        client.member_add([&peer_url], Some(learner)).await
    })
    .await;
    let new_id = added.member().unwrap().id();
    let joining = Instant::now();
    etcd.start_joining("orders-0", &host).await;
    let new_endpoint = etcd.client_endpoint("orders-0");
    eventually("the learner has the data", WITHIN, EVERY, async || {
        (local_value(&etcd, &new_endpoint, "adopt/greeting")
            .await
            .as_deref()
            == Some("hello"))
        .then_some(())
    })
    .await;
    let list = client.member_list().await.unwrap();
    let learner = list.members().iter().find(|m| m.id() == new_id).unwrap();
    assert_eq!(learner.name(), "orders-0", "the learner started");
    assert!(learner.is_learner());
    assert_eq!(learner.peer_urls(), [format!("https://{host}:2380")]);
    eventually_ok(
        "promoting the learner",
        Duration::from_secs(60),
        Duration::from_millis(500),
        async || client.member_promote(new_id).await,
    )
    .await;
    eprintln!(
        "the learner joined by name and was promoted after {:?}",
        joining.elapsed()
    );
    // The member that answers the list may apply the promotion a moment
    // after the leader does: its list is its own view.
    eventually("four started voters", WITHIN, EVERY, async || {
        let list = client.member_list().await.ok()?;
        (list.members().len() == 4
            && list
                .members()
                .iter()
                .all(|m| !m.is_learner() && !m.name().is_empty()))
        .then_some(())
    })
    .await;
    put_retrying(&mut client, "adopt/four-voters", "yes").await;

    // Dropped: no process left on the addresses, no files.
    let dir = etcd.dir().to_owned();
    let addresses: Vec<SocketAddr> = etcd
        .member_names()
        .iter()
        .map(|name| SocketAddr::from((etcd.address_of(name), 2379)))
        .collect();
    drop(client);
    drop(etcd);
    assert!(!dir.exists(), "{} is left", dir.display());
    for address in addresses {
        assert!(
            TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err(),
            "something still serves {address}"
        );
    }
    eprintln!("took {:?}", began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_etcd_harness_follows_member_pods_and_writes_its_certificates_as_secrets() {
    let began = Instant::now();
    let env = support::environment(false).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let etcd = ExternalEtcd::start(with_tls(1)).await;
    let tls = etcd.tls().unwrap();

    // The client certificate as the Secret `clientSecretRef` names: what it
    // holds reaches the cluster.
    tls.put_client_secret(&client, NS, "old-etcd-client").await;
    let text = async |key| secret_text(&client, NS, "old-etcd-client", key).await;
    let from_secret = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(text("ca.crt").await))
        .identity(Identity::from_pem(
            text("tls.crt").await,
            text("tls.key").await,
        ));
    can_read(&etcd.client_endpoint("old-1"), options(Some(from_secret)))
        .await
        .unwrap();
    // A certificate for dkv's members from the same CA, written again
    // (replaced) after a renewal.
    let names = dkv_peer_names(NS, CLUSTER);
    assert!(
        names.contains(&format!("*.{CLUSTER}-peer.{NS}.svc")),
        "{names:?}"
    );
    for _ in 0..2 {
        let peer = tls.issue(CLUSTER, &names, Usage::ServerAndClient);
        tls.put_secret(&client, NS, "orders-peer", &peer).await;
        assert_eq!(
            secret_text(&client, NS, "orders-peer", "tls.crt").await,
            peer.cert_pem
        );
    }
    assert_eq!(
        secret_text(&client, NS, "orders-peer", "ca.crt").await,
        tls.ca_pem()
    );

    // Member pods of `orders` (not another cluster's) are resolved by
    // their peer names, at their current IPs.
    let follower = etcd.follow_pods(client.clone(), NS, CLUSTER);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let create = async |name: &str, cluster: &str, ip: &str| {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "dkv.io/cluster": cluster, "app.kubernetes.io/component": "etcd"}},
            "spec": {"containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.16-0"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"podIP": ip}})),
        )
        .await
        .unwrap();
    };
    create("orders-0", CLUSTER, "127.20.0.10").await;
    create("orders-1", CLUSTER, "127.20.0.11").await;
    create("other-0", "other", "127.20.0.12").await;
    let resolved = async |host: String| {
        etcd.resolves_in("old-1", &host)
            .await
            .map(|ip| ip.to_string())
    };
    for (ordinal, ip) in [(0, "127.20.0.10"), (1, "127.20.0.11")] {
        let host = member_host(CLUSTER, NS, ordinal);
        eventually(&format!("{host} resolved"), WITHIN, EVERY, async || {
            (resolved(host.clone()).await.as_deref() == Some(ip)).then_some(())
        })
        .await;
        assert_eq!(
            resolved(format!("{host}.cluster.local")).await.as_deref(),
            Some(ip)
        );
    }
    assert_eq!(resolved(member_host("other", NS, 0)).await, None);

    // A replaced pod: its name follows the new IP; a deleted one goes.
    pods.delete("orders-1", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let host_1 = member_host(CLUSTER, NS, 1);
    eventually(
        "orders-1 gone from the hosts file",
        WITHIN,
        EVERY,
        async || resolved(host_1.clone()).await.is_none().then_some(()),
    )
    .await;
    eventually("orders-1 deleted", WITHIN, EVERY, async || {
        pods.get_opt("orders-1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    create("orders-1", CLUSTER, "127.20.0.21").await;
    eventually("orders-1 at its new IP", WITHIN, EVERY, async || {
        (resolved(host_1.clone()).await.as_deref() == Some("127.20.0.21")).then_some(())
    })
    .await;
    follower.abort();
    eprintln!("took {:?}", began.elapsed());
}
