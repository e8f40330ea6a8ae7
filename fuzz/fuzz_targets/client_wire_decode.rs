//! Any bytes a client could send to the client port: the first 256 as a request header, the rest
//! as the body of the header's command (and, so the fuzzer reaches every body decoder without
//! first solving the header, as the body of the command named by the first two bytes). No panic;
//! whatever decodes encodes back to the same bytes (but an unknown command, which keeps no body,
//! and a token login, which is checked for shape only); a send read in two parts, as the client
//! port reads it, decodes as the whole body does.
#![no_main]

use iggy_protocol::{HEADER_SIZE, Request, RequestHeader};
use libfuzzer_sys::fuzz_target;

const CODES: &[u32] = &[1, 10, 11, 12, 13, 20, 21, 22, 39, 40, 45, 100, 101, 102, 120, 121, 122, 200, 201, 202, 203, 204, 300, 301, 302, 303, 304, 205, 305, 402, 403, 503, 600, 601, 602, 603, 604, 605, 606, 14, 103, 104, 123, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43];

fn body(code: u32, bytes: &[u8]) {
    if code == iggy_protocol::codes::code::SEND_MESSAGES && bytes.len() >= 4 {
        // Read in two parts at the metadata length, as the client port reads a send: the same
        // request, or the same error, as the whole body.
        let metadata = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if let Some(head) = metadata.checked_add(4).filter(|h| *h <= bytes.len()) {
            assert_eq!(
                Request::decode_send(&bytes[..head], bytes[head..].to_vec()),
                Request::decode(code, bytes)
            );
        }
    }
    if let Ok(request) = Request::decode(code, bytes)
        && !matches!(
            request,
            Request::LoginRegisterWithToken { .. } | Request::Other { .. }
        )
    {
        let (encoded_code, encoded) = request.encode();
        assert_eq!(encoded, bytes);
        // Both login codes travel as operation Register; the body's form names the login.
        if !matches!(request, Request::LoginRegister { .. }) {
            assert_eq!(encoded_code, code);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() >= HEADER_SIZE {
        let header: &[u8; HEADER_SIZE] = data[..HEADER_SIZE].try_into().expect("256 bytes");
        if let Ok(decoded) = RequestHeader::decode(header, 1 << 20) {
            assert_eq!(&decoded.encode()[48..52], &header[48..52]);
            body(decoded.code, &data[HEADER_SIZE..]);
        }
    }
    if data.len() >= 2 {
        let code = CODES[usize::from(u16::from_le_bytes([data[0], data[1]])) % CODES.len()];
        body(code, &data[2..]);
    }
});
