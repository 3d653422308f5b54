//! A memcached server on the Corral runtime under iokerneld, to point `iokerneld gen
//! --protocol memcache-tcp` at by hand: `kv_on_corral SOCKET IP PORT`.

use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::sync::Arc;

use corral::net::{NetConfig, TcpListener};
use corral::{Config, IokernelSettings, Runtime};
use corral_memcache::{Limits, Session, Status, Store, StoreConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, socket, ip, port] = args.as_slice() else {
        eprintln!("usage: kv_on_corral SOCKET IP PORT");
        std::process::exit(2);
    };
    let ip: Ipv4Addr = ip.parse().expect("an IPv4 address");
    let port: u16 = port.parse().expect("a port");
    let rt = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(socket, "kv"))
            .net(NetConfig::new(ip, 24)),
    )
    .expect("start a networked runtime under iokerneld");
    let store = Arc::new(Store::new(StoreConfig::new(64 << 20, 1 << 20, 0)));
    rt.block_on(move || {
        let listener = TcpListener::bind((ip, port)).expect("bind");
        eprintln!("kv_on_corral: listening on {ip}:{port}");
        for conn in listener.incoming() {
            let Ok(mut stream) = conn else { continue };
            let store = store.clone();
            corral::spawn(move || {
                let mut session = Session::new(Limits::default());
                let mut buf = vec![0u8; 16 * 1024];
                let mut out = Vec::new();
                loop {
                    let n = match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    session.feed(&buf[..n]);
                    loop {
                        let status = session.run(&store, 0, &mut out);
                        if stream.write_all(&out).is_err() {
                            return;
                        }
                        out.clear();
                        match status {
                            Status::OutputFull => continue,
                            Status::NeedInput => break,
                            Status::Close => return,
                        }
                    }
                }
            });
        }
    });
}
