# tls_helpers.bash: throwaway certificates for the suites that run Redis
# over TLS (redis_tls.bats, redis_tls_cluster.bats), made with openssl in the
# test's own directory.  Needs REDIS_ADDR or CLUSTER_IP for the address the
# server certificate carries.

# tls_certs DIR: a CA, a server certificate for the Redis host (its address
# and the name redis.lab), a client certificate, and an unrelated CA.
tls_certs() {
	local d=$1 ip=${CLUSTER_IP:-${REDIS_ADDR%:*}}

	mkdir -p "$d"
	(
		cd "$d" || exit 1
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=rlgate-test-ca \
			-keyout ca.key -out ca.pem
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca \
			-keyout other.key -out other.pem
		openssl req -newkey rsa:2048 -nodes -subj /CN=redis.lab \
			-keyout server.key -out server.csr
		printf 'subjectAltName=IP:%s,DNS:redis.lab\n' "$ip" >server.ext
		openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
			-days 2 -extfile server.ext -out server.pem
		openssl req -newkey rsa:2048 -nodes -subj /CN=rlagent \
			-keyout client.key -out client.csr
		openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
			-days 2 -out client.pem
		printf 'tls-secret\n' >password
		chmod 600 password ./*.key
	) >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; return 1; }
}

