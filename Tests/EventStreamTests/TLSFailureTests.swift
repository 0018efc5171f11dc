import Testing

@testable import EventStream

/// BoringSSL's error texts carry an error number and the C source path: only the reason is
/// shown, in words.
@Suite struct TLSFailureTests {
    static let required =
        "sslError([Error: 268436572 error:1000045c:SSL routines:OPENSSL_internal:TLSV1_ALERT_CERTIFICATE_REQUIRED at /work/x/.build/checkouts/swift-nio-ssl/Sources/CNIOBoringSSL/ssl/tls_record.cc:491])"

    @Test func theReasonIsExplainedAndNoPathIsLeft() {
        #expect(TLSFailure.reason(in: Self.required) == "TLSV1_ALERT_CERTIFICATE_REQUIRED")
        let said = TLSFailure.describe(Self.required, peer: "the daemon")
        #expect(said == "a client certificate is required and none was sent")
        #expect(!said.contains("/"))
        let unknown = TLSFailure.describe(
            "handshakeFailed(x:OPENSSL_internal:SOMETHING_NEW at /a/b.cc:1)",
            peer: "the client"
        )
        #expect(unknown == "TLS failed (something new)")
        #expect(TLSFailure.describe("LineTooLong() at /src/file.swift:3", peer: "the daemon") == "LineTooLong()")
        #expect(TLSFailure.describe("connection refused", peer: "the daemon") == "connection refused")
        // BoringSSL's verification reason does not say which check failed: an expired
        // certificate was logged as "not trusted".
        #expect(
            TLSFailure.explain("CERTIFICATE_VERIFY_FAILED", peer: "the client")
                == "the certificate the client presented failed verification (not signed by a trusted CA, expired or not yet valid)"
        )
    }
}
