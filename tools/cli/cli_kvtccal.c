/* --kvtc-cal FILE|DIR (cli_kvtccal.h). */
#include "cli_kvtccal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cli.h"

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

uint8_t *cli_kvtc_cal_read(const char *path, uint64_t want, size_t *len)
{
    char file[4096];
    if (!is_dir(path)) return (uint8_t *)cli_read_file(path, len);
    if (!want) {
        cli_error("--kvtc-cal %s is a directory: give the calibration file (kvtc-<id>.cal)", path);
        return NULL;
    }
    if (snprintf(file, sizeof file, "%s/kvtc-%016llx.cal", path, (unsigned long long)want) >= (int)sizeof file) {
        cli_error("--kvtc-cal: the path '%.64s...' is too long", path);
        return NULL;
    }
    return (uint8_t *)cli_read_file(file, len);
}

int cli_kvtc_cal_attach(skv_session *s, const char *in, const char *path)
{
    uint64_t want = 0;
    size_t len = 0;
    if (skv_session_kvtc_cal_id(s, &want)) {
        cli_error("%s: %s", in, skv_session_last_error(s));
        return -1;
    }
    uint8_t *img = cli_kvtc_cal_read(path, want, &len);
    int rc = img ? skv_session_set_kvtc_cal(s, img, len) : SKV_ERR_IO;
    free(img);
    if (rc == SKV_ERR_IO)
        fprintf(stderr, "       (%s needs the calibration kvtc-%016llx.cal)\n", in, (unsigned long long)want);
    else if (rc)
        cli_error("--kvtc-cal %s: %s", path, skv_session_last_error(s));
    return rc ? -1 : 0;
}
