/* A libcuda.so.1 for tests/device/selftest.sh: the driver API calls helper.py makes, over the
   devices FAKE_CUDA_DEVICES lists ("GPU-<uuid>@<busid>,..."), filtered by
   CUDA_VISIBLE_DEVICES as the real driver does (UUIDs or ordinals; the first entry that
   names no device ends the list). */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#define MAXD 16
static char uuids[MAXD][64], buses[MAXD][32];
static int n, inited;
static int parse_all(char all_u[MAXD][64], char all_b[MAXD][32]) {
    const char *e = getenv("FAKE_CUDA_DEVICES");
    int k = 0;
    if (!e) return 0;
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", e);
    for (char *tok = strtok(buf, ","); tok && k < MAXD; tok = strtok(NULL, ",")) {
        char *at = strchr(tok, '@');
        if (!at) continue;
        *at = 0;
        snprintf(all_u[k], 64, "%s", tok);
        snprintf(all_b[k], 32, "%s", at + 1);
        k++;
    }
    return k;
}
int cuInit(unsigned flags) {
    char au[MAXD][64], ab[MAXD][32];
    int all = parse_all(au, ab);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    (void)flags;
    n = 0;
    if (!cvd) {
        for (int i = 0; i < all; i++) { strcpy(uuids[n], au[i]); strcpy(buses[n], ab[i]); n++; }
    } else {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", cvd);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            int found = -1;
            for (int i = 0; i < all; i++) {
                char *end;
                long idx = strtol(tok, &end, 10);
                if (!strcmp(tok, au[i]) || (*end == 0 && end != tok && idx == i)) found = i;
            }
            if (found < 0) break;
            strcpy(uuids[n], au[found]); strcpy(buses[n], ab[found]); n++;
        }
    }
    if (n == 0) return 100; /* CUDA_ERROR_NO_DEVICE */
    inited = 1;
    return 0;
}
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
int cuDeviceGetCount(int *c) { if (!inited) return 3; *c = n; return 0; }
int cuDeviceGet(int *d, int i) { if (!inited) return 3; if (i < 0 || i >= n) return 101; *d = i; return 0; }
static int hexval(char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }
int cuDeviceGetUuid_v2(unsigned char *out, int d) {
    const char *s = uuids[d] + 4; /* after GPU- */
    int k = 0;
    if (!inited || d < 0 || d >= n) return 101;
    for (; *s && k < 16; s++) {
        if (*s == '-') continue;
        out[k] = (unsigned char)(hexval(s[0]) << 4 | hexval(s[1]));
        k++; s++;
    }
    return 0;
}
int cuDeviceGetUuid(unsigned char *out, int d) { return cuDeviceGetUuid_v2(out, d); }
int cuDeviceGetName(char *name, int len, int d) { (void)d; snprintf(name, len, "Fake GPU"); return 0; }
int cuDeviceGetPCIBusId(char *bus, int len, int d) { snprintf(bus, len, "%s", buses[d]); return 0; }
int cuGetErrorName(int r, const char **s) {
    *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : r == 101 ? "CUDA_ERROR_INVALID_DEVICE" : r == 3 ? "CUDA_ERROR_NOT_INITIALIZED" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
