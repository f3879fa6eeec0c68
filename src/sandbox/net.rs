//! Outbound network for sandboxed commands (`WAVEGATE_SANDBOX_NETWORK=egress`).
//!
//! bwrap creates the command's network namespace and waits (`--block-fd`)
//! while wavegate attaches it: pasta connects the namespace to the host's
//! network without ever mapping the host's loopback into it (`--no-map-gw`,
//! no port forwarding either way), and `ip`, run inside the namespace's
//! owning user namespace, makes link-local, cloud metadata and the host's
//! own addresses unreachable. Then the command starts.

use super::{spawn, LaunchError};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt as _;
use tokio::process::{Child, Command};

/// Addresses no sandboxed command may reach, whatever the host routes:
/// link-local (cloud metadata at 169.254.169.254 among it), Alibaba's
/// metadata address and AWS's IPv6 metadata address.
const ALWAYS_BLOCKED: &[&str] = &["169.254.0.0/16", "100.100.100.200/32", "fd00:ec2::254/128"];

/// How long attaching may take before the command is given up on.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(20);

/// What attaching needs, found once at start.
#[derive(Debug, Clone)]
pub(crate) struct EgressTools {
    pub(crate) pasta: PathBuf,
    pub(crate) ip: PathBuf,
    /// Set when the host resolves names through a loopback address, which
    /// the sandbox cannot reach: pasta forwards DNS sent to this address,
    /// and the sandbox gets a resolv.conf naming it.
    pub(crate) dns: Option<DnsForward>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DnsForward {
    pub(crate) address: Ipv4Addr,
    pub(crate) resolv_conf: String,
}

impl EgressTools {
    /// Finds pasta and ip and reads the host's addresses and resolver.
    pub(crate) fn locate() -> Result<Self, String> {
        let pasta = super::find_program("pasta").ok_or(
            "WAVEGATE_SANDBOX_NETWORK=egress needs pasta, which is not installed: `apt-get install passt` (or set WAVEGATE_SANDBOX_NETWORK=none)",
        )?;
        let ip = super::find_program("ip").ok_or(
            "WAVEGATE_SANDBOX_NETWORK=egress needs ip, which is not installed: `apt-get install iproute2` (or set WAVEGATE_SANDBOX_NETWORK=none)",
        )?;
        let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        let dns = default_gateway().and_then(|gateway| dns_forward(&resolv, gateway));
        Ok(Self { pasta, ip, dns })
    }
}

/// What a sandbox may not reach, given the host's own addresses: the
/// destinations blocked by routes, and the host's IPv6 link-local addresses,
/// refused by policy rules.
fn unreachable(host: &[IpAddr]) -> (Vec<String>, Vec<String>) {
    let mut blocked: Vec<String> = ALWAYS_BLOCKED.iter().map(|s| (*s).to_owned()).collect();
    let mut prohibited = Vec::new();
    for address in host {
        match address {
            IpAddr::V4(v4) => blocked.push(format!("{v4}/32")),
            IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => {
                prohibited.push(format!("{v6}/128"))
            }
            IpAddr::V6(v6) => blocked.push(format!("{v6}/128")),
        }
    }
    (blocked, prohibited)
}

/// The host's own addresses other than loopback (and IPv4 link-local ones,
/// all blocked anyway): a sandbox must not reach services the host listens
/// on, IPv6 link-local ones included.
fn host_addresses() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, which is walked read-only and freed
    // once. rustix has no getifaddrs.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return found;
        }
        let mut at = list;
        while !at.is_null() {
            let addr = (*at).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(addr as *const libc::sockaddr_in);
                        found.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(addr as *const libc::sockaddr_in6);
                        found.push(IpAddr::V6(std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            at = (*at).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found.retain(|a| match a {
        IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_link_local(),
        IpAddr::V6(v6) => !v6.is_loopback(),
    });
    found.sort();
    found.dedup();
    found
}

/// The host's IPv4 default gateway, from /proc/net/route.
fn default_gateway() -> Option<Ipv4Addr> {
    let table = std::fs::read_to_string("/proc/net/route").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"00000000") {
            return None;
        }
        let raw = u32::from_str_radix(fields.get(2)?, 16).ok()?;
        // The kernel writes the address in the host's byte order.
        Some(Ipv4Addr::from(raw.to_ne_bytes()))
    })
}

/// Whether the resolver must be forwarded, and the resolv.conf the sandbox
/// then gets: only when every nameserver is a loopback address.
pub(crate) fn dns_forward(resolv_conf: &str, gateway: Ipv4Addr) -> Option<DnsForward> {
    let servers: Vec<IpAddr> = resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse().ok())
        .collect();
    if !servers.is_empty() && servers.iter().any(|s| !s.is_loopback()) {
        return None;
    }
    let mut rewritten = format!("nameserver {gateway}\n");
    for line in resolv_conf.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("search")
            || trimmed.starts_with("options")
            || trimmed.starts_with("domain")
        {
            rewritten.push_str(trimmed);
            rewritten.push('\n');
        }
    }
    Some(DnsForward {
        address: gateway,
        resolv_conf: rewritten,
    })
}

/// The network helper of one sandbox; it ends with the command.
pub(crate) struct Attached {
    pasta: Child,
}

impl Attached {
    pub(crate) fn stop(&mut self) {
        let _ = self.pasta.start_kill();
    }
}

/// Connects the namespace of the bwrap whose `--info-fd` is `info` and lets
/// its command start through `block`.
pub(crate) async fn attach(
    tools: &EgressTools,
    info: OwnedFd,
    block: OwnedFd,
) -> Result<Attached, LaunchError> {
    let failed = |why: String| LaunchError::Network(why);
    let attaching = async {
        let pid = read_child_pid(info).await?;
        let net = open_namespace(pid)?;
        let userns = owning_user_namespace(&net)?;
        let mut pasta = start_pasta(tools, &net, &userns)?;
        wait_for_default_route(pid, &mut pasta).await?;
        let v6 = has_ipv6(pid);
        // The host's addresses as they are now: it may have gained one.
        let (mut routes, prohibited) = unreachable(&host_addresses());
        routes.retain(|r| v6 || !r.contains(':'));
        let batch: String = routes
            .iter()
            .map(|r| format!("route add unreachable {r}\n"))
            .collect();
        ip_batch(&tools.ip, &net, &userns, &[], &batch).await?;
        if v6 && !prohibited.is_empty() {
            let batch: String = prohibited
                .iter()
                .map(|a| format!("rule add to {a} prohibit\n"))
                .collect();
            ip_batch(&tools.ip, &net, &userns, &["-6"], &batch).await?;
        }
        let mut block = std::fs::File::from(block);
        block
            .write_all(b"1")
            .map_err(|e| format!("cannot let the sandboxed command start: {e}"))?;
        Ok::<_, String>(Attached { pasta })
    };
    match tokio::time::timeout(ATTACH_TIMEOUT, attaching).await {
        Ok(result) => result.map_err(failed),
        Err(_) => Err(failed(format!(
            "connecting the sandbox's network took longer than {}s",
            ATTACH_TIMEOUT.as_secs()
        ))),
    }
}

async fn read_child_pid(info: OwnedFd) -> Result<i32, String> {
    let mut file = tokio::fs::File::from_std(std::fs::File::from(info));
    let mut text = String::new();
    file.read_to_string(&mut text)
        .await
        .map_err(|e| format!("cannot read bwrap's info: {e}"))?;
    let info: serde_json::Value = serde_json::from_str(&text)
        .map_err(|_| "bwrap ended before its sandbox was set up".to_owned())?;
    info["child-pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| format!("bwrap's info names no child: {text}"))
}

fn open_namespace(pid: i32) -> Result<OwnedFd, String> {
    let path = format!("/proc/{pid}/ns/net");
    std::fs::File::open(&path)
        .map(OwnedFd::from)
        .map_err(|e| format!("cannot open the sandbox's network namespace {path}: {e}"))
}

/// The user namespace that owns `net`: bwrap nests a second user namespace
/// for the command's uid, and only the outer one may configure the network.
fn owning_user_namespace(net: &OwnedFd) -> Result<OwnedFd, String> {
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    // SAFETY: an ioctl on a namespace descriptor we own; it returns a new
    // descriptor (close-on-exec). rustix has no call for this ioctl, and its
    // generic one would need an unsafe Ioctl impl on top.
    let fd = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
    if fd < 0 {
        return Err(format!(
            "cannot find the user namespace owning the sandbox's network: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just returned to us and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn start_pasta(tools: &EgressTools, net: &OwnedFd, userns: &OwnedFd) -> Result<Child, String> {
    let (net, userns) = (net.as_raw_fd(), userns.as_raw_fd());
    let uid = rustix::process::geteuid().as_raw();
    let mut command = Command::new(&tools.pasta);
    command
        .args(["--config-net", "--no-map-gw", "--quiet", "--foreground"])
        // Nothing is forwarded into the sandbox, nor from it to the host's ports.
        .args(["-t", "none", "-u", "none", "-T", "none", "-U", "none"])
        .arg("--runas")
        .arg(uid.to_string())
        .arg("--userns")
        .arg(format!("/proc/self/fd/{userns}"))
        .arg("--netns")
        .arg(format!("/proc/self/fd/{net}"));
    if let Some(dns) = &tools.dns {
        command.arg("--dns-forward").arg(dns.address.to_string());
    }
    command
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = spawn::spawn(command, &[net, userns])
        .map_err(|e| format!("cannot start pasta ({}): {e}", tools.pasta.display()))?;
    // Keep its complaints (it stops writing when nobody reads).
    if let Some(mut stderr) = child.stderr.take() {
        tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = stderr.read_to_end(&mut sink).await;
            let text = String::from_utf8_lossy(&sink);
            for line in text.lines().filter(|l| !l.contains("to syslog")).take(5) {
                tracing::debug!(target: "wavegate::sandbox", "pasta: {line}");
            }
        });
    }
    Ok(child)
}

async fn wait_for_default_route(pid: i32, pasta: &mut Child) -> Result<(), String> {
    let table = format!("/proc/{pid}/net/route");
    loop {
        let routes = std::fs::read_to_string(&table)
            .map_err(|e| format!("cannot read the sandbox's routes ({table}): {e}"))?;
        if routes
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some("00000000"))
        {
            return Ok(());
        }
        if let Ok(Some(status)) = pasta.try_wait() {
            return Err(format!(
                "pasta stopped ({status}) before the sandbox had a route out; does the host have a default route?"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn has_ipv6(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/net/if_inet6"))
        .is_ok_and(|t| t.lines().any(|l| !l.trim_end().ends_with(" lo")))
}

/// Runs `ip OPTIONS -batch -` on `batch` in the sandbox's network namespace.
async fn ip_batch(
    ip: &Path,
    net: &OwnedFd,
    userns: &OwnedFd,
    options: &[&str],
    batch: &str,
) -> Result<(), String> {
    let (net, userns): (RawFd, RawFd) = (net.as_raw_fd(), userns.as_raw_fd());
    let mut command = Command::new(ip);
    command
        .args(options)
        .args(["-batch", "-"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: setns is a system call, async-signal-safe; the descriptors stay
    // open until the child has been started, so they are open in the child.
    unsafe {
        command.pre_exec(move || {
            let (userns, net) = (BorrowedFd::borrow_raw(userns), BorrowedFd::borrow_raw(net));
            move_into_link_name_space(userns, Some(LinkNameSpaceType::User))?;
            move_into_link_name_space(net, Some(LinkNameSpaceType::Network))?;
            Ok(())
        });
    }
    let mut child = spawn::spawn(command, &[])
        .map_err(|e| format!("cannot run ip in the sandbox's network namespace: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        tokio::io::AsyncWriteExt::write_all(&mut stdin, batch.as_bytes())
            .await
            .map_err(|e| format!("cannot give ip its routes: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| format!("ip did not finish: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "ip could not make the host's and metadata addresses unreachable in the sandbox: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_resolver_is_forwarded_through_the_gateway() {
        let gateway = Ipv4Addr::new(10, 0, 0, 1);
        let stub = "# systemd-resolved\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp.example\n";
        assert_eq!(
            dns_forward(stub, gateway),
            Some(DnsForward {
                address: gateway,
                resolv_conf: "nameserver 10.0.0.1\noptions edns0 trust-ad\nsearch corp.example\n"
                    .into(),
            })
        );
        assert_eq!(dns_forward("nameserver 10.255.255.53\n", gateway), None);
        assert_eq!(
            dns_forward("nameserver 127.0.0.11\nnameserver 8.8.8.8\n", gateway),
            None,
            "a reachable resolver is enough"
        );
    }

    #[test]
    fn the_hosts_own_addresses_are_blocked_its_link_local_ones_by_a_rule() {
        let host: Vec<IpAddr> = ["192.0.2.2", "fd00::2", "fe80::fc:ff:fe00:1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let (blocked, prohibited) = unreachable(&host);
        assert!(blocked.contains(&"192.0.2.2/32".to_owned()), "{blocked:?}");
        assert!(blocked.contains(&"fd00::2/128".to_owned()), "{blocked:?}");
        assert_eq!(prohibited, ["fe80::fc:ff:fe00:1/128"]);
    }

    #[test]
    fn metadata_and_link_local_addresses_are_always_blocked() {
        assert!(ALWAYS_BLOCKED.contains(&"169.254.0.0/16"));
        assert!(host_addresses().iter().all(|a| !a.is_loopback()));
    }
}
