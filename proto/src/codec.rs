//! The codec of the generated MCP clients and servers: prost's, with
//! buffers that start small. tonic's default starts every stream with an
//! 8 KiB encode and an 8 KiB decode buffer and keeps them for the life of
//! the stream; a hub holds one such client stream per cluster (the upward
//! subscription, which sends only small requests and ACKs) and an agent
//! one server stream per hub replica, so at 10,000 clusters the defaults
//! alone are ~160 MiB of idle hub memory. A buffer grows to the largest
//! message it carries either way (tonic reserves a message's length before
//! reading it), so starting small costs a few reallocations on the first
//! big message, never a refusal.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// What every stream's buffers start at.
pub const STREAM_BUFFER: usize = 1024;

/// Past this many encoded bytes a stream yields (tonic's default).
const YIELD_THRESHOLD: usize = 32 * 1024;

/// prost's codec with [`STREAM_BUFFER`]-byte starting buffers (the
/// generated services' `codec_path`, see `build.rs`).
#[derive(Debug)]
pub struct StreamCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for StreamCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(STREAM_BUFFER, YIELD_THRESHOLD)
}

impl<T, U> Codec for StreamCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}

#[cfg(test)]
mod tests {
    use tonic::codec::{Decoder as _, Encoder as _};

    use super::*;
    use crate::mcp::RequestResources;

    #[test]
    fn both_directions_start_small() {
        let mut c = StreamCodec::<RequestResources, RequestResources>::default();
        let want = format!("buffer_size: {STREAM_BUFFER},");
        for got in [
            format!("{:?}", c.encoder().buffer_settings()),
            format!("{:?}", c.decoder().buffer_settings()),
        ] {
            assert!(got.contains(&want), "{got}");
        }
    }
}
