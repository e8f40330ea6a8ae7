//! Bytes from a stranger: any header and any body decode to a value or a refusal that names the
//! field and offset, never a panic, and whatever decodes encodes back to the same bytes.

use iggy_protocol::codes::code;
use iggy_protocol::{
    Consumer, HEADER_SIZE, Identifier, PollingStrategy, Request, RequestHeader, WireError,
};
use proptest::prelude::*;

const CODES: &[u32] = &[
    code::PING,
    code::LOGIN_REGISTER,
    code::LOGIN_REGISTER_WITH_PAT,
    code::LOGOUT_USER,
    code::GET_CLUSTER_METADATA,
    code::GET_STATS,
    code::GET_ME,
    code::GET_CLIENT,
    code::GET_CLIENTS,
    code::DESCRIBE_OPTIONS,
    code::GET_STREAM,
    code::GET_STREAMS,
    code::CREATE_STREAM,
    code::DELETE_STREAM,
    code::UPDATE_STREAM,
    code::GET_TOPIC,
    code::GET_TOPICS,
    code::CREATE_TOPIC,
    code::DELETE_TOPIC,
    code::UPDATE_TOPIC,
    code::CREATE_PARTITIONS,
    code::DELETE_PARTITIONS,
    code::DELETE_SEGMENTS,
    code::PURGE_STREAM,
    code::PURGE_TOPIC,
    code::SEND_MESSAGES,
    code::GET_SNAPSHOT,
    code::FLUSH_UNSAVED_BUFFER,
    code::POLL_MESSAGES,
    code::GET_CONSUMER_OFFSET,
    code::STORE_CONSUMER_OFFSET,
    code::DELETE_CONSUMER_OFFSET,
    code::GET_CONSUMER_GROUP,
    code::GET_CONSUMER_GROUPS,
    code::CREATE_CONSUMER_GROUP,
    code::DELETE_CONSUMER_GROUP,
    code::JOIN_CONSUMER_GROUP,
    code::LEAVE_CONSUMER_GROUP,
    code::SYNC_CONSUMER_GROUP,
    code::ATTACH_CONSUMER_SESSION,
    code::GET_POLL_ROUTING,
    code::POLL_MESSAGES_ON_PRIMARY,
    code::GET_CONSUMER_OFFSET_ROUTING,
    code::GET_USER,
    code::GET_USERS,
    code::CREATE_USER,
    code::DELETE_USER,
    code::UPDATE_USER,
    code::UPDATE_PERMISSIONS,
    code::CHANGE_PASSWORD,
    code::GET_PERSONAL_ACCESS_TOKENS,
    code::CREATE_PERSONAL_ACCESS_TOKEN,
    code::DELETE_PERSONAL_ACCESS_TOKEN,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_body_decodes_or_is_refused(index in 0..CODES.len(), body in proptest::collection::vec(any::<u8>(), 0..96)) {
        let code = CODES[index];
        if let Ok(request) = Request::decode(code, &body) {
            // Login's token form is checked for shape only; every other form encodes back.
            if !matches!(request, Request::LoginRegisterWithToken { .. }) {
                prop_assert_eq!(request.encode(), (code, body));
            }
        }
    }

    #[test]
    fn any_header_decodes_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), HEADER_SIZE), command in prop::bool::ANY) {
        let mut header: [u8; HEADER_SIZE] = bytes.try_into().unwrap();
        if command {
            header[60] = 5;
        }
        if let Ok(decoded) = RequestHeader::decode(&header, u32::MAX) {
            prop_assert!(decoded.size as usize >= HEADER_SIZE);
            prop_assert!(decoded.client != 0);
        }
    }
}

#[test]
fn a_refusal_names_the_field_and_its_offset() {
    // CreateTopic: stream id, partitions count, then a name of 0 bytes at offset 10.
    let body = [1, 4, 0, 0, 0, 0, 3, 0, 0, 0, 0];
    let error = Request::decode(code::CREATE_TOPIC, &body).unwrap_err();
    assert_eq!(error.code, code::CREATE_TOPIC);
    assert!(
        matches!(
            error.error,
            WireError::Invalid {
                what: "topic name",
                offset: 10,
                ..
            }
        ),
        "{error}"
    );
    let error = Request::decode(code::GET_STREAM, &[1, 4, 0, 0, 0, 0, 9]).unwrap_err();
    assert_eq!(
        error.error,
        WireError::Trailing {
            what: "body",
            offset: 6,
            trailing: 1
        },
        "a byte past the last field is refused"
    );
    assert_eq!(
        error.to_string(),
        "command 200: 1 bytes after the body, which ends at byte 6"
    );
    // One encoding per request (the fuzz target's finds): an absent partition is `0, 0`, and a
    // strategy that takes no value carries 0.
    let (_, mut poll) = Request::PollMessages {
        consumer: Consumer {
            group: false,
            id: Identifier::Numeric(9),
        },
        stream: Identifier::Numeric(0),
        topic: Identifier::Numeric(0),
        partition: None,
        strategy: PollingStrategy::Next,
        count: 10,
        auto_commit: false,
    }
    .encode();
    poll[20] = 38; // the partition id after a flag of 0, at byte 20
    let error = Request::decode(code::POLL_MESSAGES, &poll).unwrap_err();
    assert!(
        matches!(
            error.error,
            WireError::Invalid {
                what: "partition id",
                offset: 20,
                ..
            }
        ),
        "{error}"
    );
    poll[20] = 0;
    assert!(Request::decode(code::POLL_MESSAGES, &poll).is_ok());
    poll[25] = 7; // the value of Next
    let error = Request::decode(code::POLL_MESSAGES, &poll).unwrap_err();
    assert!(
        matches!(
            error.error,
            WireError::Invalid {
                what: "polling strategy value",
                ..
            }
        ),
        "{error}"
    );
    // An unknown command decodes (to be answered with an error status), whatever its body.
    assert_eq!(
        Request::decode(9999, &[1, 2, 3]).unwrap(),
        Request::Other { code: 9999 }
    );
}
