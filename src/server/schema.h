/* JSON schema -> GBNF (schema.c, schema_pattern.c): llama.cpp's json-schema-to-grammar rules
 * for the keywords it implements (types, properties/required/additionalProperties, const,
 * enum, arrays with items/prefixItems and minItems/maxItems, strings with minLength/
 * maxLength/pattern/format, integers with minimum/maximum, local $ref, anyOf/oneOf, allOf
 * of objects or enums). A keyword that would change what is valid and that is not
 * implemented is refused by name, never ignored. */
#ifndef SKV_SERVER_SCHEMA_H
#define SKV_SERVER_SCHEMA_H

#include <jansson.h>
#include <stddef.h>
#include "core/util.h"

/* The grammar text (malloc'd, start rule "root"), or NULL with err naming the problem. */
char *srv_schema_to_gbnf(const json_t *schema, skv_err *err);

/* The GBNF expression for a regular expression body (no ^ $): 0, or -1 with err.
 * out: malloc'd. dot: the rule name a '.' stands for. */
int srv_regex_to_gbnf(const char *re, size_t n, const char *dot, char **out, skv_err *err);

#endif
