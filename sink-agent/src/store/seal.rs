//! The seal that ends every persisted collection file: the SHA-256 of all
//! the bytes before it, written as the last field of the encoded
//! `Resources` (field 5, `nonce`, which a persisted file does not otherwise
//! use). A protobuf cut at a field boundary still decodes (to fewer
//! resources), and a flipped byte inside a body may still decode: the seal
//! turns both into a load error, so a torn or damaged file is never served.

use prost::encoding;
use sha2::{Digest as _, Sha256};

/// The seal's prefix inside the field.
const PREFIX: &str = "sha256:";
/// Field number of `Resources.nonce`.
const FIELD: u32 = 5;
/// Length of the seal's text: the prefix and 64 hex digits.
const TEXT_LEN: usize = PREFIX.len() + 64;
/// Length of the encoded field: key (1 byte), length (1 byte), text.
pub const LEN: usize = 2 + TEXT_LEN;

/// Why a file's seal does not hold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// The file does not end with a seal: cut short, or written by an
    /// agent before the seal existed.
    #[error("no seal at the end (truncated, or written before seals existed)")]
    Missing,
    /// The seal does not match the content: the file was damaged.
    #[error("the seal does not match the content (damaged)")]
    Mismatch,
}

fn text(content: &[u8]) -> String {
    format!("{PREFIX}{}", hex::encode(Sha256::digest(content)))
}

/// Appends the seal of `file` (an encoded `Resources` without field 5).
pub fn append(file: &mut Vec<u8>) {
    let seal = text(file);
    encoding::string::encode(FIELD, &seal, file);
}

/// Checks the seal at the end of `data`; returns the content before it.
pub fn check(data: &[u8]) -> Result<&[u8], SealError> {
    let split = data.len().checked_sub(LEN).ok_or(SealError::Missing)?;
    let (content, seal) = data.split_at(split);
    let key = u8::try_from((FIELD << 3) | 2).unwrap_or_default();
    let header = [key, u8::try_from(TEXT_LEN).unwrap_or_default()];
    if seal[..2] != header || !seal[2..].starts_with(PREFIX.as_bytes()) {
        return Err(SealError::Missing);
    }
    if seal[2..] != *text(content).as_bytes() {
        return Err(SealError::Mismatch);
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_checks_and_any_cut_or_flip_does_not() {
        let mut file = b"\x0a\x01v\x12\x03abc\x1a\x04body".to_vec();
        let content = file.clone();
        append(&mut file);
        assert_eq!(file.len(), content.len() + LEN);
        assert_eq!(check(&file), Ok(&content[..]));
        for cut in 0..file.len() {
            assert!(check(&file[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..content.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x01;
            assert_eq!(check(&bad), Err(SealError::Mismatch), "flip at {at}");
        }
        assert_eq!(check(&content), Err(SealError::Missing));
    }
}
