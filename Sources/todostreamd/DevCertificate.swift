import Crypto
import Foundation
import SwiftASN1
import X509

/// A self-signed certificate for development (`serve --dev-tls`), kept in the data directory
/// so that it survives restarts and clients can pin it.
enum DevCertificate {
    struct Files {
        let certificatePath: String
        let keyPath: String
        let fingerprint: String
    }

    /// Loads the development certificate from `directory`, creating it on first use.
    static func ensure(in directory: String) throws -> Files {
        let folder = (directory as NSString).appendingPathComponent("dev-tls")
        let certificatePath = (folder as NSString).appendingPathComponent("cert.pem")
        let keyPath = (folder as NSString).appendingPathComponent("key.pem")
        let manager = FileManager.default
        // One made by an earlier start is kept while it stays valid for a day more; an older
        // one is made again (a year on, every client would refuse it as expired).
        let usable =
            manager.fileExists(atPath: keyPath)
            && ((try? String(contentsOfFile: certificatePath, encoding: .utf8))
                .flatMap { try? Certificate(pemEncoded: $0) }
                .map { $0.notValidAfter > Date().addingTimeInterval(24 * 3600) && $0.notValidBefore <= Date() }
                ?? false)
        if !usable {
            try? manager.removeItem(atPath: certificatePath)
            try? manager.removeItem(atPath: keyPath)
            try manager.createDirectory(
                atPath: folder,
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700]
            )
            let (certificatePEM, keyPEM) = try generate()
            guard
                manager.createFile(atPath: keyPath, contents: Data(keyPEM.utf8), attributes: [.posixPermissions: 0o600])
            else {
                throw CocoaError(.fileWriteUnknown)
            }
            try Data(certificatePEM.utf8).write(to: URL(fileURLWithPath: certificatePath))
        }
        let pem = try String(contentsOfFile: certificatePath, encoding: .utf8)
        let certificate = try Certificate(pemEncoded: pem)
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        let digest = SHA256.hash(data: serializer.serializedBytes)
        let fingerprint = digest.map { String(format: "%02X", $0) }.joined(separator: ":")
        return Files(certificatePath: certificatePath, keyPath: keyPath, fingerprint: fingerprint)
    }

    /// A certificate and key; valid from five minutes before `now` for a year unless told
    /// otherwise (tests make expired ones).
    static func generate(
        now: Date = Date(),
        validFor: TimeInterval = 365 * 86_400
    ) throws -> (certificate: String, key: String) {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName {
            CommonName("todostreamd development certificate")
            OrganizationName("todostream")
        }
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-300),
            notValidAfter: now.addingTimeInterval(validFor),
            issuer: name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                // Its own trust anchor: clients pin it with -CAfile / trustRoots.
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([
                    .dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
                    .ipAddress(ASN1OctetString(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
                ])
            },
            issuerPrivateKey: .init(key)
        )
        return (try certificate.serializeAsPEM().pemString, key.pemRepresentation)
    }
}
