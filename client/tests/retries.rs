//! The client's retry rule against a scripted server on loopback: every try of a request carries
//! the same request number, so a try refused `TransientNotAccepted` after one whose outcome was
//! unknown (`TransientNotCommitted`) cannot commit the same body a second time under another
//! number.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use iggy_client::Client;
use iggy_protocol::response::{LoginReply, put_result_ok};
use iggy_protocol::{HEADER_SIZE, ReplyHeader, Request, RequestHeader, status};

/// Serves one connection: answers a login, then the requests it reads with `statuses`, in
/// order, and returns the request number of each.
fn scripted(listener: TcpListener, statuses: Vec<u32>) -> std::thread::JoinHandle<Vec<u64>> {
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("a connection");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut head = [0u8; HEADER_SIZE];
        stream.read_exact(&mut head).expect("a login header");
        let header = RequestHeader::decode(&head, 1 << 20).expect("a valid login");
        let mut body = vec![0u8; header.body_len()];
        stream.read_exact(&mut body).expect("its body");
        let mut login = Vec::new();
        put_result_ok(&mut login);
        LoginReply {
            user_id: 0,
            session: 77,
            protocol: iggy_protocol::PROTOCOL_VERSION,
            server_version: "test".into(),
        }
        .put(&mut login);
        let reply = ReplyHeader::answering(&header, login.len());
        stream.write_all(&reply.encode()).expect("the reply");
        stream.write_all(&login).expect("the login");
        let mut numbers = Vec::new();
        for answer in statuses {
            let mut head = [0u8; HEADER_SIZE];
            stream.read_exact(&mut head).expect("a request header");
            let header = RequestHeader::decode(&head, 1 << 20).expect("a valid header");
            let mut body = vec![0u8; header.body_len()];
            stream.read_exact(&mut body).expect("its body");
            numbers.push(header.request);
            let mut reply = ReplyHeader::answering(&header, 0);
            reply.status = answer;
            stream.write_all(&reply.encode()).expect("the reply");
        }
        numbers
    })
}

#[test]
fn a_request_refused_after_an_unknown_outcome_keeps_its_number() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let server = scripted(
        listener,
        vec![
            status::TRANSIENT_NOT_COMMITTED,
            status::TRANSIENT_NOT_ACCEPTED,
            status::TRANSIENT_NOT_ACCEPTED,
            0,
            0,
        ],
    );
    let mut client = Client::connect(address, 0x51).expect("connect");
    client.login("iggy", "iggy").expect("the scripted login");
    let create = |name: &str| Request::CreateStream {
        name: name.into(),
        options: Vec::new(),
    };
    client
        .call(&create("first"))
        .expect("committed at the fourth try");
    client.call(&create("second")).expect("committed");
    let numbers = server.join().expect("the server");
    assert_eq!(
        numbers,
        vec![1, 1, 1, 1, 2],
        "every try of the first request under its number, the next request under a new one"
    );
}
