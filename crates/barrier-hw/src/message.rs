//! The remote-store message (seed `000`) and arrival encodings.
//!
//! A member arrives by a remote store into its arrival slot in the group window: one message
//! laid out as the seed's `switch_barrier_remote_store_msg_t`, as five little-endian u64 words:
//!
//! ```text
//! word 0  msg_type (u8) | reserved (3 bytes) | group_id (u32) << 32
//! word 1  member_id (u32) | sequence (u32) << 32
//! word 2  timestamp
//! word 3  target_addr      (the group's ARRIVAL_ADDR)
//! word 4  store_value      (the arrival word, encoded per device; written last, with release)
//! ```
//!
//! The arrival word carries only 32 bits of sequence. The seeds compare such sequences with
//! `>=`, which breaks at wrap-around; here the device expands them to 64-bit epochs relative to
//! the epoch it expects ([`expand_sequence`]), and releases carry the full 64-bit epoch.

/// Message types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MessageType {
    /// A member arrived.
    Arrive = 1,
    /// The device released a member.
    Release = 2,
}

/// How a device packs member and sequence into the arrival word. Sources disagree, so each map
/// states its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrivalEncoding {
    /// `member << 32 | sequence` (the switch seed).
    MemberHigh,
    /// `sequence << 32 | member` (the public Open MPI GBA component).
    SequenceHigh,
}

impl ArrivalEncoding {
    /// Packs an arrival.
    pub fn encode(self, member: u32, sequence: u32) -> u64 {
        match self {
            ArrivalEncoding::MemberHigh => (member as u64) << 32 | sequence as u64,
            ArrivalEncoding::SequenceHigh => (sequence as u64) << 32 | member as u64,
        }
    }

    /// Unpacks an arrival into `(member, sequence)`.
    pub fn decode(self, word: u64) -> (u32, u32) {
        match self {
            ArrivalEncoding::MemberHigh => ((word >> 32) as u32, word as u32),
            ArrivalEncoding::SequenceHigh => (word as u32, (word >> 32) as u32),
        }
    }
}

/// The 64-bit epoch nearest to `expected` whose low 32 bits are `sequence` (serial-number
/// arithmetic, RFC 1982): correct across the 2^32 wrap as long as senders are within 2^31 of
/// the device, which a barrier guarantees (they are never more than one epoch apart).
pub fn expand_sequence(expected: u64, sequence: u32) -> u64 {
    let delta = sequence.wrapping_sub(expected as u32) as i32;
    expected.wrapping_add(delta as i64 as u64)
}

/// One remote-store message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// Arrive or release.
    pub msg_type: MessageType,
    /// Group.
    pub group_id: u32,
    /// Member.
    pub member_id: u32,
    /// Low 32 bits of the epoch.
    pub sequence: u32,
    /// Sender's clock, ns.
    pub timestamp: u64,
    /// Where the store goes.
    pub target_addr: u64,
    /// What is stored.
    pub store_value: u64,
}

impl Message {
    /// The five words, in order.
    pub fn to_words(&self) -> [u64; 5] {
        [
            self.msg_type as u64 | (self.group_id as u64) << 32,
            self.member_id as u64 | (self.sequence as u64) << 32,
            self.timestamp,
            self.target_addr,
            self.store_value,
        ]
    }

    /// Parses five words; `None` for an unknown message type.
    pub fn from_words(w: [u64; 5]) -> Option<Message> {
        let msg_type = match w[0] as u8 {
            1 => MessageType::Arrive,
            2 => MessageType::Release,
            _ => return None,
        };
        Some(Message {
            msg_type,
            group_id: (w[0] >> 32) as u32,
            member_id: w[1] as u32,
            sequence: (w[1] >> 32) as u32,
            timestamp: w[2],
            target_addr: w[3],
            store_value: w[4],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodings_differ_and_round_trip() {
        assert_eq!(ArrivalEncoding::MemberHigh.encode(3, 7), 0x0000_0003_0000_0007);
        assert_eq!(ArrivalEncoding::SequenceHigh.encode(3, 7), 0x0000_0007_0000_0003);
    }

    #[test]
    fn sequences_expand_across_the_wrap() {
        let near = (1u64 << 32) - 1;
        assert_eq!(expand_sequence(near, u32::MAX), near);
        assert_eq!(expand_sequence(near, 0), 1 << 32);
        assert_eq!(expand_sequence(1 << 32, u32::MAX), near);
        assert_eq!(expand_sequence(5 << 32 | 10, 9), 5 << 32 | 9);
    }

    proptest! {
        #[test]
        fn arrival_words_round_trip(member in 0u32..1000, seq in any::<u32>()) {
            for enc in [ArrivalEncoding::MemberHigh, ArrivalEncoding::SequenceHigh] {
                prop_assert_eq!(enc.decode(enc.encode(member, seq)), (member, seq));
            }
        }

        #[test]
        fn expansion_recovers_epochs_near_the_expected_one(expected in 1u64..u64::MAX / 2, skew in -1000i64..1000) {
            let epoch = (expected as i64 + skew) as u64;
            prop_assert_eq!(expand_sequence(expected, epoch as u32), epoch);
        }

        #[test]
        fn messages_round_trip(group in any::<u32>(), member in any::<u32>(), seq in any::<u32>(), ts in any::<u64>(), value in any::<u64>()) {
            let m = Message { msg_type: MessageType::Arrive, group_id: group, member_id: member, sequence: seq, timestamp: ts, target_addr: 0x58, store_value: value };
            prop_assert_eq!(Message::from_words(m.to_words()), Some(m));
        }
    }
}
