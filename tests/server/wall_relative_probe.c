/* wall_relative_probe.c — a server translation unit that reaches a layer's
 * internal header by relative path (the road its include folders cannot
 * close: "../../src/common/okv_buf.h" resolves against this file's folder
 * whatever -I says). ctest server_include_wall_probe requires
 * check_includes.cmake, run with the server's flags, to refuse it naming
 * the header. Never built. */
#include "okv_server.h"
#include "../../src/common/okv_buf.h"

int okv_server_wall_relative_probe(void);
int okv_server_wall_relative_probe(void) { return 0; }
