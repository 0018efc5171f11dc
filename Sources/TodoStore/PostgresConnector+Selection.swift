import Logging
import NIOCore
import PostgresNIO

/// No server of the list could be used: each was unreachable or, where a writable one is
/// required, read-only. Names the servers, never the password.
struct NoFittingServer: Error, CustomStringConvertible {
    /// One line per server tried: "HOST:PORT: reason".
    let reasons: [String]
    /// Every server refused what no retry changes: the password or user (class 28), or a
    /// database that does not exist (3D000). A start then fails at once.
    var settingsRefused = false

    var description: String { "no usable server (" + reasons.joined(separator: "; ") + ")" }
}

extension PostgresConnector {
    /// Whether a server whose session reports these settings may be used under `attributes`:
    /// with `read-write` or `primary`, its sessions must be writable (`transaction_read_only`
    /// off, as libpq checks) and it must not be in recovery (a standby, or a primary still
    /// replaying after a crash).
    static func fits(
        _ attributes: PostgresSettings.TargetSessionAttributes,
        transactionReadOnly: String,
        inRecovery: Bool
    ) -> Bool {
        guard attributes.requiresWritable else { return true }
        return transactionReadOnly == "off" && !inRecovery
    }

    /// Connects to the first server of the list that answers and, when the settings require a
    /// writable one, is writable, as libpq does for a multi-host URL with
    /// `target_session_attrs`. Every step is bounded: the connect (and its TLS and
    /// authentication) by the connect timeout, the check by the acquire timeout.
    ///
    /// Returns the open connection and the index of its server in the list; throws
    /// `NoFittingServer` when none fits.
    func connectToFittingServer(
        on eventLoop: any EventLoop,
        id: Int,
        logger: Logger
    ) async throws -> (connection: PostgresConnection, server: Int) {
        var reasons: [String] = []
        var refused = 0
        for index in 0..<serverCount {
            try Task.checkCancellation()
            let connection: PostgresConnection
            do {
                connection = try await PostgresConnection.connect(
                    on: eventLoop,
                    configuration: connectionConfiguration(server: index),
                    id: id,
                    logger: logger
                )
            } catch {
                reasons.append("\(serverName(index)): \(PostgresStore.describe(error))")
                if Self.refusesTheSettings(error) { refused += 1 }
                continue
            }
            guard settings.targetSessionAttributes.requiresWritable else { return (connection, index) }
            do {
                let attributes = settings.targetSessionAttributes
                let fits = try await PostgresClient.run(
                    within: settings.acquireTimeout,
                    onTimeout: { connection.close() },
                    {
                        var fits = false
                        for try await (readOnly, inRecovery) in try await connection.query(
                            "SELECT current_setting('transaction_read_only'), pg_catalog.pg_is_in_recovery()",
                            logger: logger
                        ).decode((String, Bool).self) {
                            fits = Self.fits(attributes, transactionReadOnly: readOnly, inRecovery: inRecovery)
                        }
                        return fits
                    }
                )
                if fits { return (connection, index) }
                reasons.append("\(serverName(index)): read-only (a standby?)")
            } catch {
                reasons.append("\(serverName(index)): \(PostgresStore.describe(error))")
            }
            try? await connection.close()
        }
        throw NoFittingServer(reasons: reasons, settingsRefused: refused > 0 && refused == serverCount)
    }

    /// Whether the server refused the connection for its settings: a password or user it does
    /// not accept (class 28), or a database it does not have (3D000).
    static func refusesTheSettings(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, let state = error.serverInfo?[.sqlState] else { return false }
        return state.hasPrefix("28") || state == "3D000"
    }
}
