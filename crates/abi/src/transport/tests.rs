use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::net::{AddressFamily, SocketFlags, SocketType};

use super::server::{
    Received, RecvBuffers, RecvError, RegistrationFds, RegistrationFdsError, peer_pid, recv_message,
};
use super::*;
use crate::control::{ControlError, MAX_REQUEST_LEN, Registration, Reply, Request};
use crate::{RegionBuilder, RingKind, Slot};

fn pair() -> (OwnedFd, OwnedFd) {
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

fn registration(kthreads: usize) -> Registration {
    Registration {
        name: "transport-test".into(),
        guaranteed_cores: 0,
        max_cores: 1,
        spinning_kthreads: 0,
        run_queue_capacity: 256,
        tids: (1..=kthreads as i32).collect(),
        net: None,
    }
}

fn builder(kthreads: u32) -> RegionBuilder {
    RegionBuilder::new(kthreads)
        .ingress_slots(16)
        .egress_packet_slots(16)
        .egress_command_slots(16)
}

/// Sends `fds` with a valid two-kthread registration and returns what the server side sees.
fn received_fds(fds: &[std::os::fd::BorrowedFd<'_>]) -> Vec<OwnedFd> {
    let (client, server) = pair();
    send_message(
        client.as_fd(),
        &Request::Register(registration(2)).encode(),
        fds,
    )
    .unwrap();
    let mut bufs = RecvBuffers::default();
    match recv_message(server.as_fd(), &mut bufs).unwrap() {
        Received::Message { fds, .. } => fds,
        other => panic!("expected a message, got {other:?}"),
    }
}

#[test]
fn a_registration_and_its_descriptors_survive_the_round_trip() {
    let region = RegionFile::create(&builder(2)).unwrap();
    let eventfds = [eventfd::create().unwrap(), eventfd::create().unwrap()];
    // The runtime side writes into its rings before registering; iokerneld must see it.
    let view = region.mapping.raw().attach().unwrap();
    let mut commands = view.kthread(1).unwrap().egress_command_producer();
    commands
        .try_push(Slot::value(crate::Command::TimerDeadline, 42))
        .unwrap();

    let (client, server) = pair();
    let request = Request::Register(registration(2));
    let fds = [
        region.memfd.as_fd(),
        eventfds[0].as_fd(),
        eventfds[1].as_fd(),
    ];
    send_message(client.as_fd(), &request.encode(), &fds).unwrap();

    let mut bufs = RecvBuffers::default();
    let Received::Message { len, fds } = recv_message(server.as_fd(), &mut bufs).unwrap() else {
        panic!("no message");
    };
    assert_eq!(peer_pid(server.as_fd()).unwrap(), std::process::id() as i32);
    let decoded = Request::decode(&bufs.data()[..len], fds.len()).unwrap();
    assert_eq!(decoded, request);
    let checked = RegistrationFds::check(fds, 2).unwrap();
    assert_eq!(checked.region_len as u64, region.layout.region_size());
    assert_eq!(checked.eventfds.len(), 2);

    // iokerneld's own mapping sees the runtime's writes.
    let mapping = Mapping::new(&checked.region, checked.region_len).unwrap();
    let theirs = mapping.raw().attach().unwrap();
    let mut consumer = theirs.kthread(1).unwrap().egress_command_consumer();
    let slot = consumer.try_pop().unwrap();
    assert_eq!(
        slot.command_on(RingKind::EgressCommand),
        Ok(crate::Command::TimerDeadline)
    );
    assert_eq!(slot.payload(), 42);

    // A wake-up written to the received eventfd reaches the runtime's copy, and checking made
    // the shared open file nonblocking.
    assert!(!eventfd::try_consume(eventfds[1].as_fd()).unwrap());
    eventfd::signal(checked.eventfds[1].as_fd()).unwrap();
    eventfd::wait_readable(eventfds[1].as_fd(), Some(Duration::from_secs(5))).unwrap();
    assert!(eventfd::try_consume(eventfds[1].as_fd()).unwrap());
    assert!(!eventfd::try_consume(eventfds[0].as_fd()).unwrap());
    let flags = rustix::fs::fcntl_getfl(&eventfds[0]).unwrap();
    assert!(flags.contains(rustix::fs::OFlags::NONBLOCK));

    // Closing the client end reads as a hang-up; an empty queue as nothing.
    assert!(matches!(
        recv_message(server.as_fd(), &mut bufs),
        Ok(Received::Nothing)
    ));
    drop(client);
    assert!(matches!(
        recv_message(server.as_fd(), &mut bufs),
        Ok(Received::Closed)
    ));
}

#[test]
fn a_message_longer_than_any_request_is_refused() {
    let (client, server) = pair();
    let long = vec![0xa5u8; MAX_REQUEST_LEN + 100];
    send_message(client.as_fd(), &long, &[]).unwrap();
    let mut bufs = RecvBuffers::default();
    let err = recv_message(server.as_fd(), &mut bufs).unwrap_err();
    assert!(matches!(err, RecvError::TooLong), "{err}");
    assert!(
        err.to_string().contains(&MAX_REQUEST_LEN.to_string()),
        "{err}"
    );
}

#[test]
fn garbage_and_truncated_messages_are_refused_naming_the_problem() {
    let (client, server) = pair();
    let mut bufs = RecvBuffers::default();
    let mut receive = |bytes: &[u8]| {
        send_message(client.as_fd(), bytes, &[]).unwrap();
        match recv_message(server.as_fd(), &mut bufs).unwrap() {
            Received::Message { len, fds } => Request::decode(&bufs.data()[..len], fds.len()),
            other => panic!("expected a message, got {other:?}"),
        }
    };
    let err = receive(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(matches!(err, ControlError::BadMagic(_)), "{err}");
    assert!(err.to_string().contains("bad magic 0x20544547"), "{err}");
    let whole = Request::Register(registration(1)).encode();
    let err = receive(&whole[..whole.len() - 1]).unwrap_err();
    assert!(err.to_string().contains("header says the body is"), "{err}");
    let err = receive(&whole[..7]).unwrap_err();
    assert_eq!(
        err,
        ControlError::Truncated {
            field: "header.kind"
        }
    );
    // The whole message, but without its descriptors.
    let err = receive(&whole).unwrap_err();
    assert_eq!(
        err,
        ControlError::Descriptors {
            expected: 2,
            actual: 0
        }
    );
}

#[test]
fn more_descriptors_than_a_message_carries_are_refused_before_sending() {
    let (client, _server) = pair();
    let eventfd = eventfd::create().unwrap();
    let fds = vec![eventfd.as_fd(); MAX_FDS + 1];
    let err = send_message(client.as_fd(), b"x", &fds).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("254 descriptors"), "{err}");
}

#[test]
fn an_unsealed_region_is_refused() {
    let unsealed = RegionFile::create_unsealed(&builder(2)).unwrap();
    let (a, b) = (eventfd::create().unwrap(), eventfd::create().unwrap());
    let fds = received_fds(&[unsealed.memfd.as_fd(), a.as_fd(), b.as_fd()]);
    let err = RegistrationFds::check(fds, 2).unwrap_err();
    assert!(
        matches!(
            err,
            RegistrationFdsError::Region(FdProblem::NotSealedAgainstShrinking { seals: 0 })
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("descriptor 0 (the region): the memfd is not sealed against shrinking"),
        "{err}"
    );
}

#[test]
fn an_empty_region_is_refused() {
    let memfd = rustix::fs::memfd_create(
        "empty",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    seal_region(&memfd).unwrap();
    let (a, b) = (eventfd::create().unwrap(), eventfd::create().unwrap());
    let fds = received_fds(&[memfd.as_fd(), a.as_fd(), b.as_fd()]);
    let err = RegistrationFds::check(fds, 2).unwrap_err();
    assert_eq!(err, RegistrationFdsError::Region(FdProblem::Empty));
    assert_eq!(
        err.to_string(),
        "descriptor 0 (the region): the memfd is empty"
    );
}

#[test]
fn descriptors_of_the_wrong_kind_are_refused_naming_which() {
    let region = RegionFile::create(&builder(2)).unwrap();
    let eventfd = eventfd::create().unwrap();
    let (pipe, _writer) = std::io::pipe().unwrap();

    // A pipe where the region belongs.
    let fds = received_fds(&[pipe.as_fd(), eventfd.as_fd(), eventfd.as_fd()]);
    let err = RegistrationFds::check(fds, 2).unwrap_err();
    match &err {
        RegistrationFdsError::Region(FdProblem::NotSealable { actual, .. }) => {
            assert!(actual.starts_with("pipe:"), "{actual}")
        }
        other => panic!("expected a refused region, got {other}"),
    }
    assert!(
        err.to_string().starts_with(
            "descriptor 0 (the region): it is not a memfd that supports sealing (pipe:"
        ),
        "{err}"
    );

    // The region's memfd again where kthread 1's eventfd belongs.
    let fds = received_fds(&[region.memfd.as_fd(), eventfd.as_fd(), region.memfd.as_fd()]);
    let err = RegistrationFds::check(fds, 2).unwrap_err();
    match &err {
        RegistrationFdsError::Eventfd {
            kthread: 1,
            problem: FdProblem::NotAnEventfd { actual },
        } => assert!(actual.contains("memfd:corral-region"), "{actual}"),
        other => panic!("expected kthread 1's eventfd refused, got {other}"),
    }
    assert!(
        err.to_string()
            .starts_with("descriptor 2 (eventfd of kthread 1): it is not an eventfd but /memfd:"),
        "{err}"
    );

    // A descriptor short.
    let fds = received_fds(&[region.memfd.as_fd(), eventfd.as_fd()]);
    let err = RegistrationFds::check(fds, 2).unwrap_err();
    assert_eq!(
        err,
        RegistrationFdsError::Count {
            expected: 3,
            actual: 2
        }
    );
    assert!(err.to_string().contains("2 file descriptors"), "{err}");
}

#[test]
fn register_refuses_a_mismatched_eventfd_count_and_times_out_without_a_reply() {
    let region = RegionFile::create(&builder(1)).unwrap();
    let eventfd = eventfd::create().unwrap();
    let err = client::register(
        std::path::Path::new("/nonexistent/corral.sock"),
        registration(2),
        region.memfd.as_fd(),
        &[eventfd.as_fd()],
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("1 eventfds for a registration of 2 kthreads"),
        "{err}"
    );

    let (client, server) = pair();
    let err = client::recv_reply(client.as_fd(), Duration::from_millis(20)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    server::send_reply(server.as_fd(), &Reply::Registered { runtime_id: 9 }).unwrap();
    assert_eq!(
        client::recv_reply(client.as_fd(), Duration::from_secs(5)).unwrap(),
        Reply::Registered { runtime_id: 9 }
    );
}

#[test]
fn a_listener_accepts_clients_that_connect_by_path() {
    let dir = std::env::temp_dir().join(format!("corral-abi-transport-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("control.sock");
    let _ = std::fs::remove_file(&path);
    let listener = server::bind_listener(&path, 4).unwrap();
    assert!(server::accept(listener.as_fd()).unwrap().is_none());
    let client = connect(&path).unwrap();
    let conn = server::accept(listener.as_fd()).unwrap().unwrap();
    send_message(client.as_fd(), b"hello", &[]).unwrap();
    let mut bufs = RecvBuffers::default();
    match recv_message(conn.as_fd(), &mut bufs).unwrap() {
        Received::Message { len: 5, fds } => assert!(fds.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(&bufs.data()[..5], b"hello");
    let long = dir.join("x".repeat(200));
    let err = connect(&long).unwrap_err();
    assert!(
        err.to_string().contains("not a usable unix socket path"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
