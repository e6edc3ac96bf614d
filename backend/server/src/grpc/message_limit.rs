//! Over-limit request messages answer `RESOURCE_EXHAUSTED`, as gRPC's C++ core (and so Triton) does.
//! tonic refuses a message whose length prefix passes `max_decoding_message_size` before reading its
//! body, which is what we want, but with `OUT_OF_RANGE`; this layer rewrites that one status on its way
//! out and names the flag that sets the limit.

use tonic::{Code, Status};

/// Rewrites tonic's over-limit status of a response (its headers: tonic refuses a unary request
/// before the handler runs, so the status travels in a trailers-only response).
pub(super) fn over_limit_is_resource_exhausted<B>(mut response: http::Response<B>) -> http::Response<B> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    if let Some(rewritten) = rewrite(&status) {
        // A status made of a code and a valid message always encodes; nothing to report if not.
        let _ = rewritten.add_header(response.headers_mut());
    }
    response
}

/// The `RESOURCE_EXHAUSTED` status for tonic's over-limit one; `None` for any other status.
pub(super) fn rewrite(status: &Status) -> Option<Status> {
    // tonic gives this code (and this wording) only for a message over the decoding limit; our own
    // handlers never answer OUT_OF_RANGE.
    let over_limit =
        status.code() == Code::OutOfRange && status.message().contains("message length too large");
    over_limit.then(|| {
        Status::resource_exhausted(format!(
            "{} (the server's --grpc-max-message-size; send fewer rows per request, or raise the flag)",
            status.message()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_over_limit_status_is_rewritten() {
        let tonic_says = Status::out_of_range(
            "Error, decoded message length too large: found 2000 bytes, the limit is: 1000 bytes",
        );
        let s = rewrite(&tonic_says).unwrap();
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("found 2000 bytes") && s.message().contains("--grpc-max-message-size"));
        assert!(rewrite(&Status::out_of_range("something else")).is_none());
        assert!(rewrite(&Status::invalid_argument("message length too large")).is_none());
    }
}
