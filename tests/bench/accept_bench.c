/* accept_bench: what one accept() costs a server, from a full accept queue
 * on loopback - the same program with and without librlpreload.so, so the
 * difference is what the library adds per connection (classification and a
 * token).  Connects N clients, then times N accepts; the median of ROUNDS
 * rounds, in ns per accept, on stdout: "accept_ns X".
 *   accept_bench [N [ROUNDS]]     (run it in a network namespace of its own)
 * Exit 0, 1 on failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_N	400

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200;
	int rounds = argc > 2 ? atoi(argv[2]) : 25;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int cl[MAX_N], ac[MAX_N], ls, one = 1;
	double per[256];

	if (n < 1 || n > MAX_N || rounds < 1 || rounds > 256) {
		fprintf(stderr, "Error: N 1 to %d, ROUNDS 1 to 256\n", MAX_N);
		return 1;
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ls = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(ls, MAX_N) < 0 ||
	    getsockname(ls, (struct sockaddr *)&sa, &len) < 0) {
		fprintf(stderr, "Error: couldn't listen on 127.0.0.1: %s\n",
			strerror(errno));
		return 1;
	}
	for (int r = 0; r < rounds; r++) {
		uint64_t t0;

		for (int i = 0; i < n; i++) {
			cl[i] = socket(AF_INET, SOCK_STREAM, 0);
			if (cl[i] < 0 || connect(cl[i], (struct sockaddr *)&sa,
						 sizeof(sa)) < 0) {
				fprintf(stderr, "Error: couldn't connect to "
					"127.0.0.1:%u: %s\n", ntohs(sa.sin_port),
					strerror(errno));
				return 1;
			}
		}
		t0 = now_ns();
		for (int i = 0; i < n; i++) {
			struct sockaddr_in peer;
			socklen_t plen = sizeof(peer);

			ac[i] = accept4(ls, (struct sockaddr *)&peer, &plen,
					SOCK_CLOEXEC);
			if (ac[i] < 0) {
				fprintf(stderr, "Error: couldn't accept: %s\n",
					strerror(errno));
				return 1;
			}
		}
		per[r] = (double)(now_ns() - t0) / n;
		for (int i = 0; i < n; i++) {
			close(ac[i]);
			close(cl[i]);
		}
	}
	qsort(per, (size_t)rounds, sizeof(per[0]), cmp);
	printf("accept_ns %.0f\n", per[rounds / 2]);
	return 0;
}
