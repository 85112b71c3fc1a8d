//! The codec every stepd client and server uses: protobuf, with buffers that
//! start small.
//!
//! tonic gives each call an 8 KiB encode and an 8 KiB decode buffer up
//! front. A daemon holds one long-lived stream per connected probe and per
//! subscriber, most of them idle with messages of a few hundred bytes, so
//! those buffers were a third of what an idle probe costs. They start at
//! 1 KiB here and grow as a message needs.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// Initial size of a call's encode and decode buffers.
const BUFFER_BYTES: usize = 1024;

/// Encoded bytes a stream sends before yielding (tonic's default).
const YIELD_BYTES: usize = 32 * 1024;

/// `tonic_prost::ProstCodec` with small initial buffers.
#[derive(Debug, Clone, Copy)]
pub struct LeanCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_BYTES)
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(settings())
    }
}
