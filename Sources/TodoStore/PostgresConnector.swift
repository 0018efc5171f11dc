import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import PostgresNIO

/// Turns `PostgresSettings` into postgres-nio configurations for one of its servers (the pool's,
/// and those of single connections: the journal follower's, the one that migrates), with TLS as
/// `sslmode` asks, and leases pooled connections with a bound on the wait. Which server is used
/// is chosen by `connectToFittingServer` (PostgresConnector+Selection.swift).
struct PostgresConnector: Sendable {
    let settings: PostgresSettings
    private let tlsConfiguration: TLSConfiguration?
    private let tlsContext: NIOSSLContext?

    init(settings: PostgresSettings) throws {
        self.settings = settings
        switch settings.tlsMode {
        case .disable:
            tlsConfiguration = nil
        case .prefer, .require:
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .none
            tlsConfiguration = configuration
        case .verifyCA, .verifyFull:
            var configuration = TLSConfiguration.makeClientConfiguration()
            if let path = settings.rootCertificatePath {
                do {
                    configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(path))
                } catch {
                    throw StoreError(message: "cannot read sslrootcert \(path)")
                }
            }
            configuration.certificateVerification =
                settings.tlsMode == .verifyFull ? .fullVerification : .noHostnameVerification
            tlsConfiguration = configuration
        }
        do {
            tlsContext = try tlsConfiguration.map { try NIOSSLContext(configuration: $0) }
        } catch {
            throw StoreError(message: "cannot set up TLS to PostgreSQL: \(error)")
        }
    }

    /// Session settings sent at connect: a daemon that vanishes mid-transaction (its machine
    /// lost, the network cut) must not hold the `stream_state` lock, and so every other
    /// daemon's writes, for longer than a few timeouts.
    private var startupParameters: [(String, String)] {
        [
            ("application_name", "todostreamd"),
            ("idle_in_transaction_session_timeout", String(idleHoldTimeoutMilliseconds)),
        ]
    }

    /// How long a session may sit idle holding what other daemons wait for (a transaction, the
    /// commit advisory lock) before the server ends it.
    var idleHoldTimeoutMilliseconds: Int { max(1000, Int(settings.acquireTimeout.milliseconds) * 3) }

    /// How many servers there are to choose from (one with a Unix socket).
    var serverCount: Int { settings.socketPath == nil ? settings.servers.count : 1 }

    /// The server at `index` of the list, for messages.
    func serverName(_ index: Int) -> String {
        guard settings.socketPath == nil, settings.servers.indices.contains(index) else {
            return settings.socketPath ?? "?"
        }
        return settings.servers[index].description
    }

    private func server(_ index: Int) -> PostgresSettings.Server {
        settings.servers.indices.contains(index)
            ? settings.servers[index] : PostgresSettings.Server(host: settings.host, port: settings.port)
    }

    /// The pool's configuration for the server at `index` of the list.
    func clientConfiguration(server index: Int) -> PostgresClient.Configuration {
        let server = self.server(index)
        var configuration: PostgresClient.Configuration
        if let socketPath = settings.socketPath {
            configuration = .init(
                unixSocketPath: socketPath,
                username: settings.user,
                password: settings.password,
                database: settings.database
            )
        } else {
            let tls: PostgresClient.Configuration.TLS
            switch (settings.tlsMode, tlsConfiguration) {
            case (.prefer, let configuration?): tls = .prefer(configuration)
            case (_, let configuration?): tls = .require(configuration)
            case (_, nil): tls = .disable
            }
            configuration = .init(
                host: server.host,
                port: server.port,
                username: settings.user,
                password: settings.password,
                database: settings.database,
                tls: tls
            )
        }
        configuration.options.maximumConnections = settings.poolSize
        configuration.options.minimumConnections = 0
        configuration.options.connectTimeout = settings.acquireTimeout
        configuration.options.additionalStartupParameters = startupParameters
        return configuration
    }

    /// A single connection's configuration for the server at `index` of the list.
    func connectionConfiguration(server index: Int) -> PostgresConnection.Configuration {
        let server = self.server(index)
        var configuration: PostgresConnection.Configuration
        if let socketPath = settings.socketPath {
            configuration = .init(
                unixSocketPath: socketPath,
                username: settings.user,
                password: settings.password,
                database: settings.database
            )
        } else {
            let tls: PostgresConnection.Configuration.TLS
            switch (settings.tlsMode, tlsContext) {
            case (.prefer, let context?): tls = .prefer(context)
            case (_, let context?): tls = .require(context)
            case (_, nil): tls = .disable
            }
            configuration = .init(
                host: server.host,
                port: server.port,
                username: settings.user,
                password: settings.password,
                database: settings.database,
                tls: tls
            )
        }
        configuration.options.connectTimeout = .milliseconds(settings.acquireTimeout.milliseconds)
        configuration.options.additionalStartupParameters = startupParameters
        return configuration
    }
}

/// The database did not answer in time, or the connection failed.
struct DatabaseUnavailable: Error, CustomStringConvertible {
    var description: String { "the database is unavailable" }
}

extension Duration {
    var milliseconds: Int64 {
        let parts = components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}

extension PostgresClient {
    /// Runs `body` in a task of its own and answers with its result, or with
    /// `DatabaseUnavailable` (after calling `onTimeout`) when it takes longer than `timeout`;
    /// `body` is then left to finish or fail on its own.
    static func run<Result: Sendable>(
        within timeout: Duration,
        onTimeout: @escaping @Sendable () -> Void,
        _ body: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let pending = NIOLockedValueBox<CheckedContinuation<Result, any Error>?>(nil)
        let timer = NIOLockedValueBox<Task<Void, Never>?>(nil)
        return try await withCheckedThrowingContinuation { continuation in
            pending.withLockedValue { $0 = continuation }
            timer.withLockedValue { timer in
                timer = Task {
                    do {
                        try await Task.sleep(for: timeout)
                    } catch {
                        return  // cancelled: body finished
                    }
                    let fired = pending.withLockedValue { pending -> Bool in
                        guard let continuation = pending else { return false }
                        pending = nil
                        continuation.resume(throwing: DatabaseUnavailable())
                        return true
                    }
                    if fired { onTimeout() }
                }
            }
            Task {
                let result: Swift.Result<Result, any Error>
                do {
                    result = .success(try await body())
                } catch {
                    result = .failure(error)
                }
                pending.withLockedValue { pending in
                    pending?.resume(with: result)
                    pending = nil
                }
                timer.withLockedValue { $0?.cancel() }
            }
        }
    }
}

/// Tells a transaction that was abandoned (`PostgresClient.withLease` timed out) from one that
/// had sent COMMIT: once abandoned, COMMIT is never sent; once sent, the abandoning side knows
/// the outcome is in doubt.
final class TransactionGuard: Sendable {
    private enum State {
        case working
        case committing
        case abandoned
    }

    private let state = NIOLockedValueBox(State.working)

    /// Called right before COMMIT; false when the transaction was abandoned (do not commit).
    func enterCommit() -> Bool {
        state.withLockedValue { state in
            guard state == .working else { return false }
            state = .committing
            return true
        }
    }

    /// Called by the side that gave up waiting; true when COMMIT had already been sent.
    func abandon() -> Bool {
        state.withLockedValue { state in
            if state == .committing { return true }
            state = .abandoned
            return false
        }
    }
}
