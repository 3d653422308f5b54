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
        preemption: crate::control::PreemptionMode::Cooperative,
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

/// Sends `fds` with a valid two-kthread registration and returns the descriptors the server side
/// receives.
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
    // The runtime side writes into its rings before registering; iokerneld must see it.
    let view = region.mapping.raw().attach().unwrap();
    let mut commands = view.kthread(1).unwrap().egress_command_producer();
    commands
        .try_push(Slot::value(crate::Command::TimerDeadline, 42))
        .unwrap();

    let (client, server) = pair();
    let request = Request::Register(registration(2));
    send_message(client.as_fd(), &request.encode(), &[region.memfd.as_fd()]).unwrap();

    let mut bufs = RecvBuffers::default();
    let Received::Message { len, fds } = recv_message(server.as_fd(), &mut bufs).unwrap() else {
        panic!("no message");
    };
    assert_eq!(peer_pid(server.as_fd()).unwrap(), std::process::id() as i32);
    let decoded = Request::decode(&bufs.data()[..len], fds.len()).unwrap();
    assert_eq!(decoded, request);
    let checked = RegistrationFds::check(fds).unwrap();
    assert_eq!(checked.region_len as u64, region.layout.region_size());

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
            expected: 1,
            actual: 0,
            what: "the region",
        }
    );
}

#[test]
fn more_descriptors_than_a_message_carries_are_refused_before_sending() {
    let (client, _server) = pair();
    let (pipe, _writer) = std::io::pipe().unwrap();
    let fds = vec![pipe.as_fd(); MAX_FDS + 1];
    let err = send_message(client.as_fd(), b"x", &fds).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("254 descriptors"), "{err}");
}

#[test]
fn an_unsealed_region_is_refused() {
    let unsealed = RegionFile::create_unsealed(&builder(2)).unwrap();
    let fds = received_fds(&[unsealed.memfd.as_fd()]);
    let err = RegistrationFds::check(fds).unwrap_err();
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
    let fds = received_fds(&[memfd.as_fd()]);
    let err = RegistrationFds::check(fds).unwrap_err();
    assert_eq!(err, RegistrationFdsError::Region(FdProblem::Empty));
    assert_eq!(
        err.to_string(),
        "descriptor 0 (the region): the memfd is empty"
    );
}

#[test]
fn a_descriptor_of_the_wrong_kind_is_refused_naming_it() {
    let (pipe, _writer) = std::io::pipe().unwrap();
    let fds = received_fds(&[pipe.as_fd()]);
    let err = RegistrationFds::check(fds).unwrap_err();
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
}

#[test]
fn a_registration_without_exactly_one_descriptor_is_refused_and_what_came_is_closed() {
    let region = RegionFile::create(&builder(2)).unwrap();

    let err = RegistrationFds::check(received_fds(&[])).unwrap_err();
    assert_eq!(err, RegistrationFdsError::Count { actual: 0 });
    assert_eq!(
        err.to_string(),
        "0 descriptors came with the registration, expected 1 (the region)"
    );

    // The region followed by the write end of a pipe: once the refusal has closed iokerneld's
    // copy of that end and ours is dropped, the read end sees end-of-file.
    let (mut reader, writer) = std::io::pipe().unwrap();
    let fds = received_fds(&[region.memfd.as_fd(), writer.as_fd()]);
    drop(writer);
    let err = RegistrationFds::check(fds).unwrap_err();
    assert_eq!(err, RegistrationFdsError::Count { actual: 2 });
    assert_eq!(
        err.to_string(),
        "2 descriptors came with the registration, expected 1 (the region)"
    );
    let mut byte = [0u8; 1];
    assert_eq!(std::io::Read::read(&mut reader, &mut byte).unwrap(), 0);
}

#[test]
fn register_sends_the_region_alone_and_a_reply_wait_times_out() {
    let dir = std::env::temp_dir().join(format!("corral-abi-register-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("control.sock");
    let _ = std::fs::remove_file(&path);
    let listener = server::bind_listener(&path, 4).unwrap();
    let region = RegionFile::create(&builder(2)).unwrap();
    let region_size = region.layout.region_size();
    let iokerneld = std::thread::spawn(move || {
        let conn = loop {
            if let Some(conn) = server::accept(listener.as_fd()).unwrap() {
                break conn;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let mut bufs = RecvBuffers::default();
        let (len, fds) = loop {
            match recv_message(conn.as_fd(), &mut bufs).unwrap() {
                Received::Message { len, fds } => break (len, fds),
                Received::Nothing => std::thread::sleep(Duration::from_millis(1)),
                Received::Closed => panic!("the runtime hung up before registering"),
            }
        };
        assert_eq!(fds.len(), 1);
        let request = Request::decode(&bufs.data()[..len], fds.len()).unwrap();
        assert_eq!(request, Request::Register(registration(2)));
        let checked = RegistrationFds::check(fds).unwrap();
        assert_eq!(checked.region_len as u64, region_size);
        server::send_reply(conn.as_fd(), &Reply::Registered { runtime_id: 7 }).unwrap();
        conn
    });
    let (_conn, reply) = client::register(
        &path,
        registration(2),
        region.memfd.as_fd(),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(reply, Reply::Registered { runtime_id: 7 });
    drop(iokerneld.join().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();

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
