//! End-to-end tests of iokerneld's packet switch with `corral-abi-client` processes: local
//! switching, spoofing, bad descriptors, and a TAP device with real Linux peers (a UDP socket,
//! and an AF_PACKET socket writing malformed frames).
//!
//! Every daemon runs on CPU 0 and manages CPU 1, with its socket in a fresh temporary
//! directory and, for TAP tests, a TAP device and subnet of its own. The tests share CPU 1, so
//! they hold `serial()` while they run. Every wait is bounded.

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Launch, WAIT, client_binary, serial, wait_until};
use corral_iokernel::daemon::{RuntimeStats, Stats};

const MAC_A: &str = "02:00:00:00:0a:01";
const MAC_B: &str = "02:00:00:00:0b:01";

type Daemon = common::Daemon<Stats>;

impl Daemon {
    /// iokerneld with its log kept; `extra` chooses the NIC.
    fn start(extra: &[&str]) -> Daemon {
        Daemon::launch(Launch {
            args: &[],
            socket: "iokerneld.sock",
            extra,
            log: true,
        })
    }

    fn client(&self, name: &str, args: &[&str]) -> Client {
        let mut client = Client::start(&self.socket, name, args, Some(self.log_file()));
        client.expect("registered ");
        client
    }
}

fn runtime<'a>(stats: &'a Stats, name: &str) -> &'a RuntimeStats {
    stats
        .runtimes
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no runtime {name:?} in {stats:#?}"))
}

fn drops(r: &RuntimeStats, name: &str) -> u64 {
    r.packets.drops[name]
}

/// A `corral-abi-client` process whose output lines are collected; killed on drop.
type Client = common::client::AbiClient;

/// `done sent N completed N dropped N received N intact N` as numbers.
fn done_counts(line: &str) -> [u64; 5] {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 11, "{line}");
    [2, 4, 6, 8, 10].map(|i| words[i].parse().unwrap())
}

fn echo_args(mac: &str, ip: &str) -> Vec<String> {
    ["--mode", "echo", "--mac", mac, "--ip", ip]
        .map(String::from)
        .to_vec()
}

fn ping_args(mac: &str, ip: &str, peer_mac: &str, peer_ip: &str, count: u64) -> Vec<String> {
    let count = count.to_string();
    [
        "--mode",
        "ping",
        "--mac",
        mac,
        "--ip",
        ip,
        "--peer-mac",
        peer_mac,
        "--peer-ip",
        peer_ip,
        "--count",
        &count,
        "--payload-len",
        "200",
    ]
    .map(String::from)
    .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn two_clients_exchange_frames_through_local_switching() {
    let _serial = serial();
    let daemon = Daemon::start(&["--nic", "none"]);
    let _echo = daemon.client("echo", &strs(&echo_args(MAC_A, "10.1.0.1")));
    let mut ping = daemon.client(
        "ping",
        &strs(&ping_args(MAC_B, "10.1.0.2", MAC_A, "10.1.0.1", 20)),
    );
    let [sent, completed, dropped, received, intact] = done_counts(&ping.expect("done "));
    assert_eq!((sent, completed, dropped), (20, 20, 0));
    assert_eq!((received, intact), (20, 20), "every ping came back intact");
    let stats = daemon.wait_for("the switch counters", |s| s.net.local_switched == 40);
    let (echo, ping) = (runtime(&stats, "echo"), runtime(&stats, "ping"));
    for r in [echo, ping] {
        assert_eq!(r.packets.rx_packets, 20, "{r:#?}");
        assert_eq!(r.packets.tx_packets, 20, "{r:#?}");
        assert_eq!(r.packets.local_switched, 20, "{r:#?}");
        assert!(r.packets.drops.values().all(|&n| n == 0), "{r:#?}");
    }
    assert_eq!(echo.net.as_ref().unwrap().ipv4, "10.1.0.1");
    assert_eq!(echo.net.as_ref().unwrap().mac, MAC_A);
    assert_eq!(stats.net.rx_packets, 40);
    assert!(stats.nic.is_none());
}

#[test]
fn a_taken_mac_or_address_is_refused_naming_it() {
    let _serial = serial();
    let daemon = Daemon::start(&["--nic", "none"]);
    let _a = daemon.client("first", &strs(&echo_args(MAC_A, "10.1.0.1")));
    for (mac, ip, what) in [
        (MAC_A, "10.1.0.9", "MAC already registered by"),
        (MAC_B, "10.1.0.1", "IPv4 address already registered by"),
    ] {
        let out = Command::new(client_binary())
            .arg("--socket")
            .arg(&daemon.socket)
            .args([
                "--name", "second", "--mode", "echo", "--mac", mac, "--ip", ip,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(what) && text.contains("\"first\""), "{text}");
    }
}

#[test]
fn spoofed_frames_are_dropped_and_counted() {
    let _serial = serial();
    let daemon = Daemon::start(&["--nic", "none"]);
    let _victim = daemon.client("victim", &strs(&echo_args(MAC_A, "10.1.0.1")));
    let mut spoof = daemon.client(
        "spoofer",
        &[
            "--mode",
            "spoof",
            "--mac",
            MAC_B,
            "--ip",
            "10.1.0.2",
            "--peer-mac",
            MAC_A,
            "--peer-ip",
            "10.1.0.1",
            "--count",
            "9",
        ],
    );
    let [sent, completed, dropped, _, _] = done_counts(&spoof.expect("done "));
    assert_eq!((sent, completed, dropped), (9, 9, 9));
    let stats = daemon.stats();
    let (victim, spoofer) = (runtime(&stats, "victim"), runtime(&stats, "spoofer"));
    assert_eq!(drops(spoofer, "tx_spoofed"), 9, "{spoofer:#?}");
    assert_eq!(spoofer.packets.tx_packets, 0);
    assert_eq!(victim.packets.rx_packets, 0, "nothing reached the victim");
    assert_eq!(stats.net.drops["tx_spoofed"], 9);
}

#[test]
fn out_of_bounds_descriptors_are_dropped_or_evicted_and_others_carry_on() {
    let _serial = serial();
    let daemon = Daemon::start(&["--nic", "none"]);
    let _echo = daemon.client("echo", &strs(&echo_args(MAC_A, "10.1.0.1")));
    let mut oob = daemon.client(
        "oob-tx",
        &[
            "--mode",
            "oob-tx",
            "--mac",
            "02:00:00:00:0c:01",
            "--ip",
            "10.1.0.3",
            "--count",
            "6",
        ],
    );
    let [sent, completed, dropped, _, _] = done_counts(&oob.expect("done "));
    assert_eq!((sent, completed, dropped), (6, 6, 6));
    let stats = daemon.stats();
    assert_eq!(drops(runtime(&stats, "oob-tx"), "tx_out_of_bounds"), 6);
    assert_eq!(stats.global.evictions, 0, "a bad TxPacket is only dropped");

    let mut post = daemon.client(
        "oob-post",
        &[
            "--mode",
            "oob-post",
            "--mac",
            "02:00:00:00:0d:01",
            "--ip",
            "10.1.0.4",
        ],
    );
    let evicted = post.expect("evicted: ");
    assert!(evicted.contains("RxBufferPost"), "{evicted}");
    assert!(evicted.contains("outside the packet area"), "{evicted}");

    // Everyone else is still served.
    let mut ping = daemon.client(
        "ping",
        &strs(&ping_args(MAC_B, "10.1.0.2", MAC_A, "10.1.0.1", 5)),
    );
    let [_, _, dropped, received, intact] = done_counts(&ping.expect("done "));
    assert_eq!((dropped, received, intact), (0, 5, 5));
    let stats = daemon.stats();
    assert_eq!(stats.global.evictions, 1);
    assert!(stats.runtimes.iter().all(|r| r.name != "oob-post"));
}

/// A TAP device name and /24 subnet unique to this test process and `test`.
fn tap_setup(test: u8) -> (String, [u8; 3]) {
    let pid = std::process::id();
    (
        format!("crl{}t{test}", pid % 100_000),
        [10, 70 + (pid % 50) as u8, test],
    )
}

fn ip_addr_show(dev: &str) -> String {
    let out = Command::new("ip")
        .args(["-4", "addr", "show", "dev", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends `payload` from a UDP socket on the host address to the client until the echo comes
/// back; returns the number of attempts.
fn udp_round_trip(host: Ipv4Addr, client: Ipv4Addr, payload: &[u8]) -> usize {
    let socket = UdpSocket::bind((host, 0)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + WAIT;
    let mut attempts = 0;
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        attempts += 1;
        socket.send_to(payload, (client, 9999)).unwrap();
        if let Ok((n, from)) = socket.recv_from(&mut buf) {
            assert_eq!(from, (client, 9999).into());
            assert_eq!(&buf[..n], payload, "the echo came back intact");
            return attempts;
        }
    }
    panic!("no echo from {client} after {attempts} attempts");
}

#[test]
fn tap_device_carries_udp_between_linux_and_an_echo_client() {
    let _serial = serial();
    let (tap, [a, b, c]) = tap_setup(1);
    let host = Ipv4Addr::new(a, b, c, 1);
    let client_ip = Ipv4Addr::new(a, b, c, 2);
    let cidr = format!("{host}/24");
    let daemon = Daemon::start(&["--nic", "tap", "--tap-name", &tap, "--host-ip", &cidr]);
    let shown = ip_addr_show(&tap);
    assert!(shown.contains(&cidr), "{shown}");
    assert!(shown.contains("UP"), "{shown}");
    let _echo = daemon.client("echo", &strs(&echo_args(MAC_A, &client_ip.to_string())));
    // No static neighbour entry: Linux's ARP request is switched to the client, which answers.
    udp_round_trip(host, client_ip, b"hello through the tap");
    udp_round_trip(host, client_ip, &[0xab; 1400]);
    // A datagram sent again (no echo within the retry interval, as on a loaded machine) is
    // echoed too, possibly after the round trip returned: wait, bounded, until every frame
    // delivered to the client has been answered, then check that it was.
    let mut stats = daemon.stats();
    let answered_by = Instant::now() + WAIT;
    while Instant::now() < answered_by && {
        let echo = runtime(&stats, "echo");
        echo.packets.tx_packets != echo.packets.rx_packets
    } {
        std::thread::sleep(Duration::from_millis(10));
        stats = daemon.stats();
    }
    let echo = runtime(&stats, "echo");
    assert!(
        echo.packets.rx_packets >= 3,
        "ARP request and two datagrams: {echo:#?}"
    );
    assert_eq!(
        echo.packets.tx_packets, echo.packets.rx_packets,
        "{echo:#?}"
    );
    assert_eq!(echo.packets.local_switched, 0);
    let nic = stats.nic.as_ref().unwrap();
    assert_eq!(nic.backend, "tap");
    assert!(
        nic.counters.rx_frames >= 3 && nic.counters.tx_frames >= 3,
        "{nic:#?}"
    );
    drop(daemon);
    // The device was not persistent: it goes with iokerneld.
    wait_until(&format!("{tap} to go with iokerneld"), WAIT, || {
        ip_addr_show(&tap).is_empty()
    });
}

/// A raw AF_PACKET socket bound to `dev`, sending whole Ethernet frames.
struct RawSocket {
    fd: std::os::fd::OwnedFd,
    ifindex: i32,
}

impl RawSocket {
    fn open(dev: &str) -> RawSocket {
        let name = std::ffi::CString::new(dev).unwrap();
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        assert!(ifindex > 0, "no interface {dev}");
        // SAFETY: plain socket creation; the result is checked and owned below.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        assert!(raw >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        RawSocket { fd, ifindex }
    }

    /// Sends one frame; frames the kernel refuses (too long) are ignored.
    fn send(&self, frame: &[u8]) {
        // SAFETY: sockaddr_ll is plain data; all-zero is valid before the fields are set.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = self.ifindex;
        addr.sll_halen = 6;
        for (dst, src) in addr.sll_addr.iter_mut().zip(frame.iter().take(6)) {
            *dst = *src;
        }
        // SAFETY: `frame` and `addr` are valid for the call and their lengths are passed.
        unsafe {
            libc::sendto(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
        }
    }
}

fn mac_bytes(text: &str) -> [u8; 6] {
    let v: Vec<u8> = text
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// An Ethernet + IPv4 + UDP frame with a correct header checksum, to be broken by the caller.
fn udp_frame(dst: [u8; 6], src_ip: [u8; 4], dst_ip: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + 16];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x77, 0x77]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&44u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src_ip);
    ip[16..20].copy_from_slice(&dst_ip);
    fix_ip_checksum(&mut f);
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&9999u16.to_be_bytes());
    f[38..40].copy_from_slice(&24u16.to_be_bytes());
    f
}

fn fix_ip_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    f[24..26].fill(0);
    let mut sum = 0u32;
    for pair in f[14..14 + ihl].chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

#[test]
fn malformed_frames_from_the_host_are_counted_and_harm_nobody() {
    let _serial = serial();
    let (tap, [a, b, c]) = tap_setup(2);
    let host = Ipv4Addr::new(a, b, c, 1);
    let client_ip = Ipv4Addr::new(a, b, c, 2);
    let cidr = format!("{host}/24");
    let mut daemon = Daemon::start(&["--nic", "tap", "--tap-name", &tap, "--host-ip", &cidr]);
    let _echo = daemon.client("echo", &strs(&echo_args(MAC_A, &client_ip.to_string())));
    let raw = RawSocket::open(&tap);
    let mac = mac_bytes(MAC_A);
    let (src, dst) = (host.octets(), client_ip.octets());
    let good = udp_frame(mac, src, dst);

    let mut bad_checksum = good.clone();
    bad_checksum[24] ^= 0xff;
    let mut bad_total_length = good.clone();
    bad_total_length[16..18].copy_from_slice(&900u16.to_be_bytes());
    fix_ip_checksum(&mut bad_total_length);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x43;
    let mut fragment = good.clone();
    fragment[20] = 0x20; // more fragments
    fix_ip_checksum(&mut fragment);
    let mut ipv6 = good.clone();
    ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
    let mut truncated_ip = good.clone();
    truncated_ip.truncate(14 + 12);
    let mut unknown_mac = good.clone();
    unknown_mac[5] ^= 0x33;
    let oversized = {
        let mut f = good.clone();
        f.resize(1600, 0);
        f
    };
    let cases: [(&[u8], &str); 6] = [
        (&bad_checksum, "bad_ip_checksum"),
        (&bad_total_length, "bad_total_length"),
        (&bad_ihl, "bad_ihl"),
        (&fragment, "fragment"),
        (&ipv6, "unsupported_ethertype"),
        (&truncated_ip, "truncated"),
    ];
    for (frame, _) in &cases {
        raw.send(frame);
    }
    raw.send(&unknown_mac);
    raw.send(&oversized);
    let mut random = [0u8; 300];
    for i in 0..50u64 {
        let len = 1 + (fastrand_like(i) % 300) as usize;
        for (j, byte) in random.iter_mut().enumerate().take(len) {
            *byte = fastrand_like(i * 1000 + j as u64) as u8;
        }
        // Half to the client's MAC, half to whatever the bytes say.
        if i % 2 == 0 && len >= 6 {
            random[..6].copy_from_slice(&mac);
        }
        raw.send(&random[..len]);
    }

    let stats = daemon.wait_for("every malformed frame to be counted", |s| {
        let echo = runtime(s, "echo");
        cases
            .iter()
            .all(|(_, reason)| echo.packets.rx_parse_drops[*reason] >= 1)
            && s.net.drops["rx_unknown_mac"] >= 1
    });
    let echo = runtime(&stats, "echo");
    assert_eq!(
        echo.packets.rx_packets, 0,
        "nothing malformed was delivered: {echo:#?}"
    );
    daemon.assert_alive();
    // And the client is still reachable.
    udp_round_trip(host, client_ip, b"still here");
}

/// A runtime that registers addresses but never posts a receive buffer (nor reads its ring):
/// iokerneld holds at most `rx_backlog_frames` of its frames, drops and counts the rest, and
/// gives the memory back when the runtime goes. Another runtime on the same TAP is untouched.
#[test]
fn a_runtime_that_never_takes_its_frames_costs_only_its_backlog() {
    const BACKLOG: u64 = 64;
    const SENT: u64 = 200;
    let _serial = serial();
    let (tap, [a, b, c]) = tap_setup(3);
    let host = Ipv4Addr::new(a, b, c, 1);
    let stuck_ip = Ipv4Addr::new(a, b, c, 2);
    let echo_ip = Ipv4Addr::new(a, b, c, 3);
    let cidr = format!("{host}/24");
    let backlog = BACKLOG.to_string();
    let tap_args = ["--nic", "tap", "--tap-name", &tap, "--host-ip", &cidr];
    let mut daemon = Daemon::start(&[&tap_args[..], &["--rx-backlog-frames", &backlog]].concat());
    // `idle` with addresses: registered for frames, but with no packet area it posts nothing.
    let stuck_args = [
        "--mode",
        "idle",
        "--mac",
        MAC_A,
        "--ip",
        &stuck_ip.to_string(),
    ]
    .map(String::from);
    let stuck = daemon.client("stuck", &strs(&stuck_args));
    let _echo = daemon.client("echo", &strs(&echo_args(MAC_B, &echo_ip.to_string())));
    udp_round_trip(host, echo_ip, b"before");

    let raw = RawSocket::open(&tap);
    let frame = udp_frame(mac_bytes(MAC_A), host.octets(), stuck_ip.octets());
    for i in 0..SENT {
        raw.send(&frame);
        if i % 20 == 19 {
            // Paced, so that the TAP device's own queue never overflows and every frame
            // reaches iokerneld.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let stats = daemon.wait_for(
        "every frame to the stuck runtime to be held or dropped",
        |s| {
            let r = runtime(s, "stuck");
            r.net.as_ref().unwrap().rx_backlog_held as u64 + drops(r, "rx_backlog_full") >= SENT
        },
    );
    let r = runtime(&stats, "stuck");
    let net = r.net.as_ref().unwrap();
    assert_eq!(net.rx_backlog_held as u64, BACKLOG, "{r:#?}");
    assert_eq!(net.rx_backlog_high_water as u64, BACKLOG, "{r:#?}");
    assert_eq!(net.rx_backlog_capacity as u64, BACKLOG, "{r:#?}");
    assert_eq!(r.packets.rx_backlogged, BACKLOG, "{r:#?}");
    assert_eq!(drops(r, "rx_backlog_full"), SENT - BACKLOG, "{r:#?}");
    assert_eq!(r.packets.rx_packets, 0, "it posted no buffer: {r:#?}");
    assert_eq!(
        drops(r, "rx_no_buffer") + drops(r, "rx_ring_full"),
        0,
        "{r:#?}"
    );
    let echo = runtime(&stats, "echo");
    assert_eq!(echo.net.as_ref().unwrap().rx_backlog_held, 0, "{echo:#?}");

    drop(stuck);
    daemon.wait_for("the stuck runtime to go", |s| {
        s.runtimes.iter().all(|r| r.name != "stuck")
    });
    daemon.assert_alive();
    udp_round_trip(host, echo_ip, b"after");
}

/// A small deterministic scrambler for the random frames (splitmix64).
fn fastrand_like(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
