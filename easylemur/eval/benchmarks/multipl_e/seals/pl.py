"""Perl, sealed (`script.py` has the layout): the program stage runs the completion and the
tests' `$candidate->(...)` calls inside the tests' own `sub testhumaneval` (in list context, as
the tests' `eq_deeply($candidate->(...), ...)` makes them), and writes what each returned in a
tagged, length-prefixed format; the judge runs MultiPL-E's tests unchanged (Test::Deep's
`eq_deeply`) with the prompt's sub returning those values rebuilt.

What crosses is what `eq_deeply` tells apart in the values MultiPL-E compares: undef, a plain
scalar as its string (Test::Deep compares non-references with `eq`; characters cross as UTF-8),
unblessed array and hash references. Anything else (a blessed or code reference, a scalar
reference, a cyclic or huge structure) crosses as a marker that makes the stub die: against
MultiPL-E's expected values (never blessed, never a scalar reference) eq_deeply fails each of
them too.

One deliberate difference: the tests call the function in list context, so a returned list
flattens into `eq_deeply`'s arguments; a sub returning two values or more makes
`eq_deeply(v1, v2, expected)`, which ignores the expected value (`return (1, 1)` passes every
test of the reference). The stub hands the tests back a list of at most one value (an empty
list as is: the same verdict as the reference, which then compares the expected value against
undef) and dies on a longer one.

The judge stubs Test::Builder, which `use Test::Deep` loads for `cmp_deeply`'s reports and
`eq_deeply` never uses: half of Perl's start in the judge (a test that called `cmp_deeply`
would die: a failure). The program stage loads the real one, as the tests' head does in the
reference, since Test::Deep's exports (`any`, `all`, `set`, `str`, ...) replace the candidate's
subs of those names there too."""

from __future__ import annotations

import re

from easylemur.eval.benchmarks.multipl_e.seals import scan, script

SYNTAX = scan.Syntax(quotes="\"'", line_comment="#", block_comment=())

# Format: a call is "l<count>:" and its values; a value is "u" (undef), "s<bytes>:<UTF-8>", "a<count>:"
# and its items, "h<count>:" and its key-value pairs, or "!<bytes>:<why>" for one that cannot cross.
ENCODER = r"""{
    # easylemur's driver: each call's list of values in a tagged format the judge parses (seals/pl.py).
    package Easylemur::Seal;
    require Scalar::Util;
    my ($values, $budget) = ("", 0);
    # opened before any call: a chdir of the function's moves nothing
    open(my $out, ">:raw", "values") or die "easylemur: cannot write the values: $!\n";
    sub _string { my $s = "$_[0]"; utf8::encode($s); return length($s) . ":" . $s }
    sub _enc {
        my ($v, $depth) = @_;
        die "easylemur-uncarried: a structure too large or too deep (cyclic?)\n"
            if ++$budget > 1000000 || $depth > 1000;
        return "u" unless defined $v;
        return "s" . _string($v) unless ref $v;
        die "easylemur-uncarried: a blessed reference\n" if defined Scalar::Util::blessed($v);
        my $type = ref $v;
        return "a" . scalar(@$v) . ":" . join("", map { _enc($_, $depth + 1) } @$v) if $type eq "ARRAY";
        return "h" . scalar(keys %$v) . ":" . join("", map { "s" . _string($_) . _enc($v->{$_}, $depth + 1) } keys %$v)
            if $type eq "HASH";
        die "easylemur-uncarried: a reference of type $type\n";
    }
    sub record {
        my @list = @_;
        local $@;  # the candidate's own $@ stays as it was
        $budget = 0;
        my $items = eval { join "", map { _enc($_, 0) } @list };
        if (!defined $items) {
            my $why = "$@";
            die $why unless $why =~ s/^easylemur-uncarried: //;
            chomp $why;
            $items = "!" . _string($why);
        }
        $values .= "l" . scalar(@list) . ":" . $items;
    }
    sub flush {
        local ($\, $,);  # whatever separators the candidate set
        print $out $values;
        close($out) or die "easylemur: cannot write the values: $!\n";
    }
}
"""

DECODER = r"""BEGIN {
    # easylemur's judge. The tests' `use Test::Deep` loads Test::Builder for cmp_deeply's reports;
    # eq_deeply, all the tests call, never touches it: a stub in its place (no candidate code runs here).
    $INC{"Test/Builder.pm"} = "easylemur's judge";
    package Test::Builder;
    sub new { return bless {}, shift }
}
{
    # The program's values, parsed (never evaluated) and handed back one call at a time.
    package Easylemur::Judge;
    my @calls;
    sub _bad { die "easylemur: the program's values cannot be used: $_[0]\n" }
    sub _item {
        my ($d, $depth) = @_;
        _bad("nested too deeply") if $depth > 10000;
        return undef if $$d =~ /\Gu/gc;
        if ($$d =~ /\G([s!])([0-9]{1,9}):/gc) {
            my ($tag, $length, $at) = ($1, $2, pos($$d));
            _bad("a string runs past the end") if $at + $length > length($$d);
            my $s = substr($$d, $at, $length);
            pos($$d) = $at + $length;
            utf8::decode($s) or _bad("a string is not UTF-8");
            die "easylemur: the function returned a value its tests cannot be given: $s\n" if $tag eq "!";
            return $s;
        }
        if ($$d =~ /\G([ah])([0-9]{1,9}):/gc) {
            my ($tag, $count) = ($1, $2);
            _bad("a count runs past the end") if $count > length($$d) - pos($$d);
            if ($tag eq "a") {
                my @items;
                push @items, scalar _item($d, $depth + 1) for 1 .. $count;
                return \@items;
            }
            my %hash;
            for (1 .. $count) {
                _bad("a hash key is not a string") unless $$d =~ /\G(?=s)/gc;
                my $key = _item($d, $depth + 1);
                $hash{$key} = _item($d, $depth + 1);
            }
            return \%hash;
        }
        _bad("garbled at byte " . pos($$d));
    }
    open(my $fh, "<:raw", "values") or _bad("no values file ($!)");
    my $data = do { local $/; <$fh> };
    close($fh);
    $data = "" unless defined $data;
    pos($data) = 0;
    while (pos($data) < length($data)) {
        _bad("garbled at byte " . pos($data)) unless $data =~ /\Gl([0-9]{1,9}):/gc;
        my $count = $1;
        _bad("a count runs past the end") if $count > length($data) - pos($data);
        my @list;
        push @list, scalar _item(\$data, 0) for 1 .. $count;
        push @calls, \@list;
    }
    _bad(scalar(@calls) . " values for @CALLS@ calls") unless @calls == @CALLS@;
    my $next = 0;
    sub next_value {
        _bad("more calls than values") if $next >= @calls;
        my $list = $calls[$next++];
        die "easylemur: call $next returned a list of " . scalar(@$list) . " values; its test compares one\n"
            if @$list > 1;
        return @$list;
    }
}
"""

SEAL = script.ScriptSeal(
    comparison=re.compile(r"[ \t]*if\s*\(\s*eq_deeply\("),
    find=lambda tests, where: scan.calls(tests, ("$candidate->",), SYNTAX, where),
    record="Easylemur::Seal::record(@CALL@);", encoder=ENCODER, flush="Easylemur::Seal::flush();\n",
    decoder=DECODER, stub="    return Easylemur::Judge::next_value();\n}\n")

program = SEAL.program  # languages.build_program's entry point
