/*
 * A stand-in for a KAE OpenSSL engine in tests: the engine id given at build time
 * (-DENGINE_ID="uadk_engine" or "kae") and the five control commands the KAE engines define,
 * UADK_CMD_ENABLE_{CIPHER,DIGEST,RSA,DH,ECC}_ENV (numeric). It implements no algorithm; it
 * reports each command it receives on stderr, so a test sees what a configuration sent it.
 * Written for this project's tests from OpenSSL's documented ENGINE API.
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <stdio.h>
#include <string.h>
#include <openssl/engine.h>

#define SWITCHES 5
static const char *classes[SWITCHES] = {"CIPHER", "DIGEST", "RSA", "DH", "ECC"};
static char names[SWITCHES][32];
static ENGINE_CMD_DEFN commands[SWITCHES + 1];

static int standin_ctrl(ENGINE *e, int cmd, long value, void *p, void (*f)(void))
{
    int index = cmd - ENGINE_CMD_BASE;

    (void)p;
    (void)f;
    if (index < 0 || index >= SWITCHES)
        return 0;
    fprintf(stderr, "engine %s got %s=%ld\n", ENGINE_get_id(e), names[index], value);
    return 1;
}

static int standin_bind(ENGINE *e, const char *id)
{
    int i;

    if (id != NULL && strcmp(id, ENGINE_ID) != 0)
        return 0;
    for (i = 0; i < SWITCHES; i++) {
        snprintf(names[i], sizeof(names[i]), "UADK_CMD_ENABLE_%s_ENV", classes[i]);
        commands[i].cmd_num = ENGINE_CMD_BASE + i;
        commands[i].cmd_name = names[i];
        commands[i].cmd_desc = "switch";
        commands[i].cmd_flags = ENGINE_CMD_FLAG_NUMERIC;
    }
    memset(&commands[SWITCHES], 0, sizeof(commands[SWITCHES]));
    return ENGINE_set_id(e, ENGINE_ID) && ENGINE_set_name(e, "test stand-in")
        && ENGINE_set_ctrl_function(e, standin_ctrl) && ENGINE_set_cmd_defns(e, commands);
}

IMPLEMENT_DYNAMIC_CHECK_FN()
IMPLEMENT_DYNAMIC_BIND_FN(standin_bind)
