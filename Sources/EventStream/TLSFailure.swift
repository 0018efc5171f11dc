/// What a TLS library's error says, in a person's words: BoringSSL's errors describe
/// themselves with an error number, the library's reason name and the path of the C source
/// file that raised it (`…:OPENSSL_internal:TLSV1_ALERT_UNKNOWN_CA at /…/tls_record.cc:491`).
/// Only the reason is worth showing; the rest are internals.
public enum TLSFailure {
    /// The reason name in an error's description (`TLSV1_ALERT_UNKNOWN_CA`), nil when it has none.
    public static func reason(in description: String) -> String? {
        guard let range = description.firstRange(of: "OPENSSL_internal:") else { return nil }
        let name = description[range.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" }
        return name.isEmpty ? nil : String(name)
    }

    /// A sentence for a handshake that failed with `reason`, from the side that says
    /// `peer` for the other end ("the daemon", "the client").
    public static func explain(_ reason: String, peer: String) -> String {
        switch reason {
        case "TLSV1_ALERT_CERTIFICATE_REQUIRED", "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "a client certificate is required and none was sent"
        case "TLSV1_ALERT_UNKNOWN_CA", "TLSV1_ALERT_BAD_CERTIFICATE", "SSLV3_ALERT_BAD_CERTIFICATE":
            return "\(peer) did not accept the certificate (not signed by a CA it trusts)"
        case "SSLV3_ALERT_CERTIFICATE_EXPIRED", "TLSV1_ALERT_CERTIFICATE_EXPIRED":
            return "\(peer) refused an expired certificate"
        case "CERTIFICATE_VERIFY_FAILED":
            // BoringSSL's reason does not say which check failed (the alert sent does).
            return
                "the certificate \(peer) presented failed verification (not signed by a trusted CA, expired or not yet valid)"
        case "WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST":
            return "not TLS: \(peer) speaks plain text there"
        case "NO_RENEGOTIATION":
            return "renegotiation is not supported"
        case "UNSUPPORTED_PROTOCOL", "TLSV1_ALERT_PROTOCOL_VERSION":
            return "no TLS version both sides support (1.2 and 1.3 are)"
        case "NO_SHARED_CIPHER", "SSLV3_ALERT_HANDSHAKE_FAILURE":
            return "no cipher both sides support"
        default:
            return "TLS failed (\(reason.lowercased().replacing("_", with: " ")))"
        }
    }

    /// `description` with its TLS reason explained, or as it is when it has none. For an
    /// error with no reason name, a trailing source path (` at /…`) is cut all the same.
    public static func describe(_ description: String, peer: String) -> String {
        if let reason = reason(in: description) { return explain(reason, peer: peer) }
        if let at = description.firstRange(of: " at /") {
            return String(description[..<at.lowerBound])
        }
        return description
    }
}
