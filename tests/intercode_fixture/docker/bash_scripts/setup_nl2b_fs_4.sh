#!/bin/bash

# a dummy command
export file_system_version=4
