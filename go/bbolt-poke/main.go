// bbolt-poke changes the stored value of one etcd key in a member's backend
// database, in place and without changing any revision, so that the
// member's data differs from its peers' at the same revision: what etcd's
// corruption checks (which compare hashes of the key bucket at a revision)
// exist to find. dkv's tests use it on a stopped member.
//
//	bbolt-poke DB KEY
//
// DB is the member's bbolt file (<data-dir>/member/snap/db); KEY the etcd
// key whose value to change. Each record of the "key" bucket holds an
// etcd KeyValue protobuf; in every revision of KEY with a non-empty value
// the last byte of the value is flipped, so each record keeps its length
// and stays a valid protobuf. It prints how many records it changed and
// fails when it changed none.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The fields of an etcd KeyValue record this tool reads (protobuf field
// numbers); both are length-delimited.
const (
	fieldKey   = 1
	fieldValue = 5
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: bbolt-poke DB KEY")
		os.Exit(2)
	}
	changed, err := poke(os.Args[1], []byte(os.Args[2]))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bbolt-poke: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	fmt.Printf("changed the value of %d revision(s) of %q\n", changed, os.Args[2])
}

func poke(path string, key []byte) (int, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, err
	}
	// A running member holds the file's lock: wait a little, then say so
	// rather than hang.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("opening the database (is the member stopped?): %w", err)
	}
	defer db.Close()
	changed := 0
	err = db.Update(func(tx *bolt.Tx) error {
		bucket := tx.Bucket([]byte("key"))
		if bucket == nil {
			return errors.New(`no bucket "key": not an etcd backend database`)
		}
		type edit struct{ rev, record []byte }
		var edits []edit
		err := bucket.ForEach(func(rev, record []byte) error {
			at, ok, err := valueOffset(record, key)
			if err != nil {
				return fmt.Errorf("record %x: %w", rev, err)
			}
			if !ok {
				return nil
			}
			// bbolt's slices are only valid inside the transaction and
			// must not be written to: change a copy, put it after.
			copied := append([]byte(nil), record...)
			copied[at] ^= 0x01
			edits = append(edits, edit{append([]byte(nil), rev...), copied})
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range edits {
			if err := bucket.Put(e.rev, e.record); err != nil {
				return err
			}
		}
		changed = len(edits)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if changed == 0 {
		return 0, fmt.Errorf("no revision of key %q with a non-empty value", key)
	}
	return changed, nil
}

// valueOffset reads a KeyValue record: whether its key is key and its
// value is not empty, and the offset of the value's last byte in record.
func valueOffset(record, key []byte) (int, bool, error) {
	var gotKey []byte
	last := -1
	for i := 0; i < len(record); {
		tag, n := uvarint(record[i:])
		if n <= 0 {
			return 0, false, errors.New("malformed field tag")
		}
		i += n
		field, wire := tag>>3, tag&7
		switch wire {
		case 0: // varint
			_, n := uvarint(record[i:])
			if n <= 0 {
				return 0, false, errors.New("malformed varint")
			}
			i += n
		case 2: // length-delimited
			size, n := uvarint(record[i:])
			if n <= 0 || size > uint64(len(record)-i-n) {
				return 0, false, errors.New("malformed length")
			}
			i += n
			body := record[i : i+int(size)]
			switch {
			case field == fieldKey:
				gotKey = body
			case field == fieldValue && size > 0:
				last = i + int(size) - 1
			}
			i += int(size)
		default:
			return 0, false, fmt.Errorf("wire type %d not expected in a KeyValue", wire)
		}
	}
	return last, last >= 0 && bytes.Equal(gotKey, key), nil
}

// uvarint decodes a protobuf varint: the value and the bytes it took
// (0 or less when malformed).
func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}
