import Testing

@testable import TodoStore

@Suite struct PostgresSettingsTests {
    @Test func parsesALibpqStyleURL() throws {
        let settings = try PostgresSettings(
            url: "postgres://todo:p%40ss@db.example.net:6543/todos?sslmode=verify-full&sslrootcert=/etc/ca.pem"
        )
        #expect(settings.host == "db.example.net")
        #expect(settings.port == 6543)
        #expect(settings.user == "todo")
        #expect(settings.password == "p@ss")
        #expect(settings.database == "todos")
        #expect(settings.tlsMode == .verifyFull)
        #expect(settings.rootCertificatePath == "/etc/ca.pem")
        #expect(settings.socketPath == nil)
    }

    @Test func defaultsFollowLibpq() throws {
        let settings = try PostgresSettings(url: "postgresql://todo@localhost")
        #expect(settings.port == 5432)
        #expect(settings.database == "todo")
        #expect(settings.tlsMode == .prefer)
        #expect(settings.password == nil)
    }

    @Test func aUnixSocketDirectory() throws {
        let settings = try PostgresSettings(url: "postgres://todo@/todos?host=/run/postgresql")
        #expect(settings.socketPath == "/run/postgresql/.s.PGSQL.5432")
        #expect(settings.tlsMode == .disable)
        let other = try PostgresSettings(url: "postgres://todo@/todos?host=/tmp/pg&port=5433")
        #expect(other.socketPath == "/tmp/pg/.s.PGSQL.5433")
    }

    @Test func theDescriptionNeverShowsThePassword() throws {
        let settings = try PostgresSettings(url: "postgres://todo:hunter22@db:5432/todos?sslmode=require")
        #expect(!settings.description.contains("hunter22"))
        #expect(settings.description.contains("db:5432/todos"))
    }

    @Test func mistakesAreExplainedWithoutThePassword() {
        func message(_ url: String) -> String? {
            do {
                _ = try PostgresSettings(url: url)
                return nil
            } catch {
                return error.message
            }
        }
        #expect(message("mysql://a@b/c")?.contains("postgres://") == true)
        #expect(message("postgres://a:hunter22@b/c?sslmode=sometimes")?.contains("sslmode=sometimes") == true)
        #expect(message("postgres://a:hunter22@b/c?sslmode=sometimes")?.contains("hunter22") == false)
        #expect(message("postgres://a@b/c?sslmode=verify-ca")?.contains("sslrootcert") == true)
        #expect(message("postgres://b/c")?.contains("no user") == true)
        #expect(message("postgres://a@b/c?colour=blue")?.contains("colour") == true)
    }

    @Test func bothEnginesShareTheSchemaVersioning() {
        #expect(PostgresMigrations.steps.count == Migrations.steps.count)
    }
}

@Suite struct PostgresMultiHostSettingsTests {
    @Test func parsesAListOfServersInOrder() throws {
        let settings = try PostgresSettings(
            url: "postgres://todo:secret@db1.example.net:5433,db2.example.net,[::1]:6000/todos"
                + "?target_session_attrs=read-write&port=5440"
        )
        #expect(
            settings.servers == [
                .init(host: "db1.example.net", port: 5433),
                .init(host: "db2.example.net", port: 5440),
                .init(host: "::1", port: 6000),
            ]
        )
        #expect(settings.host == "db1.example.net")
        #expect(settings.port == 5433)
        #expect(settings.targetSessionAttributes == .readWrite)
        #expect(settings.targetSessionAttributes.requiresWritable)
        #expect(settings.database == "todos")
        #expect(settings.password == "secret")
    }

    @Test func aHostWithoutAPortTakesTheDefault() throws {
        let settings = try PostgresSettings(url: "postgres://todo@a,b:7000/x")
        #expect(settings.servers.map(\.port) == [5432, 7000])
        #expect(settings.targetSessionAttributes == .any)
        #expect(!settings.targetSessionAttributes.requiresWritable)
    }

    @Test func targetSessionAttributesAcceptsWhatLibpqDoesForAPrimary() throws {
        for (value, expected) in [
            ("any", PostgresSettings.TargetSessionAttributes.any), ("read-write", .readWrite), ("primary", .primary),
        ] {
            let settings = try PostgresSettings(url: "postgres://todo@a,b/x?target_session_attrs=\(value)")
            #expect(settings.targetSessionAttributes == expected)
            #expect(settings.targetSessionAttributes.requiresWritable == (expected != .any))
        }
    }

    @Test func theDescriptionListsEveryServerAndNeverThePassword() throws {
        let settings = try PostgresSettings(
            url: "postgres://todo:hunter22@h1:1,h2:2,[fe80::1]:3/todos?sslmode=require&target_session_attrs=primary"
        )
        #expect(
            settings.description
                == "postgres://todo@h1:1,h2:2,[fe80::1]:3/todos sslmode=require target_session_attrs=primary"
        )
        #expect(!settings.description.contains("hunter22"))
        let single = try PostgresSettings(url: "postgres://todo:hunter22@db:5432/todos?sslmode=require")
        #expect(single.description == "postgres://todo@db:5432/todos sslmode=require")
    }

    @Test func badListsAndValuesAreExplainedWithoutThePassword() {
        func message(_ url: String) -> String? {
            do {
                _ = try PostgresSettings(url: url)
                return nil
            } catch {
                return error.message
            }
        }
        let bad = [
            ("postgres://a:hunter22@b/c?target_session_attrs=standby", "target_session_attrs=standby"),
            ("postgres://a:hunter22@b/c?target_session_attrs=", "target_session_attrs="),
            ("postgres://a:hunter22@h1,,h2/c", "empty entry"),
            ("postgres://a:hunter22@h1,/c", "empty entry"),
            ("postgres://a:hunter22@h1:99999,h2/c", "out of range"),
            ("postgres://a:hunter22@h1:http,h2/c", "not a number"),
            ("postgres://a:hunter22@h1,::1/c", "[ADDRESS]:PORT"),
            ("postgres://a:hunter22@[::1/c", "unclosed ["),
            ("postgres://a:hunter22@h1,h2/c?host=/run/postgresql", "list of hosts"),
            ("postgres://a:hunter22@h1/c#frag", "fragment"),
        ]
        for (url, expected) in bad {
            let text = message(url)
            #expect(text?.contains(expected) == true, "\(url): \(text ?? "accepted")")
            #expect(text?.contains("hunter22") == false, "\(url)")
        }
        #expect(message("postgres://a@b/c?target_session_attrs=standby")?.contains("read-write") == true)
        // A password with an unencoded /, ? or # (a base64 one, say): no piece of it in the
        // message (it was quoted as a port, a parameter or an sslmode).
        for url in [
            "postgres://a:Zm9v/YmFyS3ECRET@db/c", "postgres://a:Zm9v?YmFyS3ECRET@db/c",
            "postgres://a:Zm9v?sslmode=YmFyS3ECRET@db/c", "postgres://a:Zm9v#YmFyS3ECRET@db/c",
        ] {
            let text = message(url)
            #expect(text?.contains("percent-encoded") == true, "\(url): \(text ?? "accepted")")
            #expect(text?.contains("Zm9v") == false && text?.contains("S3ECRET") == false, "\(text ?? "")")
        }
        // An @ in a parameter of a URL that has its user part is not that.
        #expect(message("postgres://a:pw@db/c?sslmode=verify-full&sslrootcert=/etc/ca@1.pem") == nil)
    }

    @Test func eachServerOfTheListGetsConfigurationsOfItsOwn() throws {
        let connector = try PostgresConnector(
            settings: PostgresSettings(url: "postgres://todo:pw@h1:6001,h2/x?port=6002&sslmode=disable")
        )
        #expect(connector.serverCount == 2)
        #expect(connector.clientConfiguration(server: 0).host == "h1")
        #expect(connector.clientConfiguration(server: 0).port == 6001)
        #expect(connector.clientConfiguration(server: 1).host == "h2")
        #expect(connector.clientConfiguration(server: 1).port == 6002)
        #expect(connector.connectionConfiguration(server: 1).host == "h2")
        #expect(connector.connectionConfiguration(server: 1).port == 6002)
        #expect(connector.serverName(1) == "h2:6002")
        let socket = try PostgresConnector(settings: PostgresSettings(url: "postgres://todo@/x?host=/tmp/pg&port=6003"))
        #expect(socket.serverCount == 1)
        #expect(socket.clientConfiguration(server: 0).unixSocketPath == "/tmp/pg/.s.PGSQL.6003")
        #expect(socket.serverName(0) == "/tmp/pg/.s.PGSQL.6003")
    }

    @Test func serversAreWritableOnlyWhenNeitherReadOnlyNorInRecovery() {
        #expect(PostgresConnector.fits(.any, transactionReadOnly: "on", inRecovery: true))
        #expect(PostgresConnector.fits(.readWrite, transactionReadOnly: "off", inRecovery: false))
        #expect(!PostgresConnector.fits(.readWrite, transactionReadOnly: "on", inRecovery: true))
        #expect(!PostgresConnector.fits(.readWrite, transactionReadOnly: "on", inRecovery: false))
        #expect(!PostgresConnector.fits(.primary, transactionReadOnly: "off", inRecovery: true))
        #expect(PostgresConnector.fits(.primary, transactionReadOnly: "off", inRecovery: false))
    }
}
