/*
 * fnlib.h - the broker's Redis function library on one master: loaded by
 * the command link's handshake, and again when a call finds it gone
 * (fnlib.c).  node.fn says how calls go to that master: FCALL once it is
 * loaded, EVALSHA where Redis will not take it (no FUNCTION before Redis
 * 7, an ACL, no memory).
 */
#ifndef LOCKBROKER_FNLIB_H
#define LOCKBROKER_FNLIB_H

#include "node.h"

/* The handshake's FUNCTION LOAD (never REPLACE: the library's name
 * carries the hash of its text), expected before the handshake goes on;
 * its reply sets n->fn, or fails the handshake. */
void fnlib_hello(struct node *n);
/* A call sent when n's library had been loaded `loads` times found no
 * function: load it again, once per loss (the call itself goes again as
 * EVAL, behind it). */
void fnlib_reload(struct node *n, unsigned loads);

#endif
