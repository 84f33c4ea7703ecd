#!/usr/bin/python3
"""A BMC for bootops' tests: pyghmi's server side (Debian python3-pyghmi)
with faults a test sets while it runs.

It answers IPMI 2.0 (RMCP+) on 127.0.0.1 only, user and password as given.
Every chassis power or boot-device order is appended to STATE/told.log; the
faults are read from STATE/faults.json before each request:
  latency    seconds to wait before answering
  drop_every n: the n-th, 2n-th, ... request gets no answer
  hang       true: no request gets an answer
  late_state seconds a power change takes to show in the chassis status
"""

import argparse
import json
import os
import sys
import time

import pyghmi.ipmi.bmc as bmc


class FaultyBmc(bmc.Bmc):
    def __init__(self, authdata, port, state):
        super().__init__(authdata, port=port, address='127.0.0.1')
        self.state = state
        self.power = 'on'
        self.shown = 'on'
        self.shown_at = 0.0
        self.bootdevice = 'default'
        self.requests = 0

    def faults(self):
        try:
            with open(os.path.join(self.state, 'faults.json')) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def told(self, what):
        with open(os.path.join(self.state, 'told.log'), 'a') as f:
            f.write(what + '\n')

    def set_power(self, p):
        self.power = p
        self.shown_at = time.time() + float(self.faults().get('late_state', 0))

    def handle_raw_request(self, request, session):
        f = self.faults()
        self.requests += 1
        if f.get('hang'):
            return
        n = int(f.get('drop_every', 0))
        if n > 0 and self.requests % n == 0:
            return
        if f.get('latency'):
            time.sleep(float(f['latency']))
        return super().handle_raw_request(request, session)

    def get_power_state(self):
        if time.time() >= self.shown_at:
            self.shown = self.power
        return self.shown

    def power_on(self):
        self.told('power on')
        self.set_power('on')

    def power_off(self):
        self.told('power off')
        self.set_power('off')

    def power_cycle(self):
        self.told('power cycle')
        self.set_power('on')

    def power_reset(self):
        self.told('power reset')
        self.set_power('on')

    def power_shutdown(self):
        self.told('power soft')
        self.set_power('off')

    def get_boot_device(self):
        return self.bootdevice

    def set_boot_device(self, bootdevice):
        self.told('boot ' + str(bootdevice))
        self.bootdevice = bootdevice

    def cold_reset(self):
        return 0

    def is_active(self):
        return self.power == 'on'


def main():
    p = argparse.ArgumentParser(prog='fakebmc.py')
    p.add_argument('--port', type=int, required=True)
    p.add_argument('--user', required=True)
    p.add_argument('--password', required=True)
    p.add_argument('--state', required=True)
    a = p.parse_args()
    b = FaultyBmc({a.user: a.password}, a.port, a.state)
    open(os.path.join(a.state, 'ready'), 'w').close()
    b.listen()


if __name__ == '__main__':
    sys.exit(main())
